"""What code above the store holds of the database without speaking SQL: an `Engine` and a
`Connection` (the transaction a writer's callback joins), and the database errors a caller
classifies (`db` says what each means). Only SQLAlchemy is imported here, so naming these costs
no more than before."""

from __future__ import annotations

from sqlalchemy.engine import Connection as Connection
from sqlalchemy.engine import Engine as Engine
from sqlalchemy.engine import RowMapping as RowMapping
from sqlalchemy.exc import DatabaseError as DatabaseError
from sqlalchemy.exc import DataError as DataError
from sqlalchemy.exc import IntegrityError as IntegrityError
from sqlalchemy.exc import OperationalError as OperationalError
from sqlalchemy.exc import ProgrammingError as ProgrammingError
from sqlalchemy.exc import SQLAlchemyError as SQLAlchemyError
