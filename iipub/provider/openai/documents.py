"""A response saved from OpenAI, read, pure: what `iipub jobs import-payload` takes from a file an
operator recovered (the dashboard's JSON, the SDK's `response.output_text`), in iipub's words
(`outcomes.SavedResponse`). Accepted:
- a JSON object with a string `output_text` (the SDK's `response.output_text`, or a hand-made
  `{"output_text": "..."}`); if it is also a response object, its id, status, usage and
  metadata are kept;
- a Responses API response object (`"object": "response"` or an `output` list): the text of
  its `output_text` content parts, in order, as the SDK joins them; its status must be a
  finished one (completed, incomplete).
Anything else is not a saved response (None): the file's text is then the output itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from iipub.core.errors import OperatorRefused
from iipub.provider.openai.codes import FINISHED_STATUSES, answer_messages
from iipub.provider.outcomes import SavedResponse, Usage

_MAX_TOKENS = 10**12


def read_saved(data: Mapping[str, Any]) -> SavedResponse | None:
    """The saved response `data` holds, or None when it is not one; `OperatorRefused` for a
    response that holds no output to import."""
    is_response = data.get("object") == "response" or isinstance(data.get("output"), list)
    if "output_text" in data:
        if not isinstance(data["output_text"], str):
            raise OperatorRefused("the file's `output_text` is not a string; nothing written")
        text, source = data["output_text"], "output_text"
    elif is_response:
        text, source = _response_text(data.get("output")), "response"
    else:
        return None
    if not is_response:
        return SavedResponse(text, source)
    status = data.get("status")
    if status is not None and status not in FINISHED_STATUSES:
        raise OperatorRefused(f"the response in the file is {str(status)[:40]!r}, not finished (completed or "
                              "incomplete): it holds no output to import; nothing written")
    rid = data.get("id")
    meta = data.get("metadata")
    return SavedResponse(
        text, source,
        response_id=rid[:128] if isinstance(rid, str) and rid else None,
        status=status if isinstance(status, str) else None,
        usage=_usage(data.get("usage")),
        metadata={str(k)[:64]: str(v)[:512] for k, v in meta.items()} if isinstance(meta, dict) else {},
    )


def _response_text(output: Any) -> str:
    """The output text of a response object's `output` items, read as custody reads it: the
    final answer's `output_text` parts in order (`codes.answer_messages`)."""
    parts: list[str] = []
    for item in answer_messages(output) if isinstance(output, list) else []:
        if not isinstance(item.get("content"), list):
            continue
        parts.extend(c["text"] for c in item["content"]
                     if isinstance(c, dict) and c.get("type") == "output_text" and isinstance(c.get("text"), str))
    return "".join(parts)


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    values = [raw.get(k) for k in ("input_tokens", "output_tokens", "total_tokens")]
    counts = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _MAX_TOKENS]
    return Usage(*counts) if len(counts) == 3 else None
