-- The custody watch (PRODUCT.md section 20): a parked job (QUARANTINED, MANUALLY_SUSPENDED) that
-- holds a response id and no payload has its response read at its own slow cadence, whatever its
-- poll budget, so output that finishes while it is parked is stored. custody_watch_at is when the
-- watch reads it next (NULL: at the next tick); it is not a state write (no version, no journal).

ALTER TABLE jobs ADD COLUMN custody_watch_at DATETIME(6) NULL;
