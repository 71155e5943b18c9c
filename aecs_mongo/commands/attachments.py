"""``aecs-mongo extract``: a message's parts (mu extract's habits) and the text read from them.

``extract ID`` lists each attachment (index, file name, type, size, characters of text);
``--text IDX`` prints one attachment's whole text; ``--save DIR`` writes the attachments
byte-exact under safe names (only the last part of a name is kept, so ``../../x`` stays inside
DIR; an existing file is not overwritten without ``--overwrite``); ``--pending`` reads the
attachments left unread (a store with ``extract_later``, or mail stored before attachment text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .base import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    Context,
    Output,
    StatusLine,
    human_size,
    on_terminal,
)

__all__ = ["extract", "safe_name"]

_UNSAFE = re.compile(r"[\x00-\x1f\x7f/\\:]")


def safe_name(filename: str | None, idx: int) -> str:
    """A file name that stays in its directory: the last part of ``filename`` (either slash),
    control characters and separators replaced, no leading dot; ``attachment-IDX`` when nothing
    is left."""
    last = re.split(r"[/\\]", filename or "")[-1]
    name = _UNSAFE.sub("_", last).strip().lstrip(".").strip()
    return name[:200] or f"attachment-{idx}"


def extract(ctx: Context) -> Output:
    args = ctx.args
    if args.pending:
        if args.id or args.save or args.text is not None:
            raise CliError("--pending reads every message left unread: give no ID, --save or --text", EXIT_USAGE)
        line = StatusLine(on_terminal())

        def progress(done: int) -> None:
            if line.due():
                line.show(f"reading attachments: {done} messages")

        try:
            count = ctx.store.extract_pending(limit=args.limit, progress=progress)
        finally:
            line.close()
        return Output({"read": count}, [f"read the attachments of {count} messages"])
    if not args.id:
        raise CliError("give a Message-ID (or --pending)", EXIT_USAGE)
    message = ctx.store.get_message(args.id)
    if message is None:
        raise CliError(f"no message {args.id!r} in mailbox {args.mailbox!r}")
    attachments: list[Mapping[str, Any]] = list(message.get("attachments") or ())
    if args.text is not None:
        if ctx.json:
            raise CliError("--text prints the text itself; leave out --json", EXIT_USAGE)
        if not 0 <= args.text < len(attachments):
            raise CliError(
                f"message {args.id!r} has {len(attachments)} attachments (--text 0 to {len(attachments) - 1})"
            )
        text = ctx.store.get_attachment_text(args.id, args.text)
        if text is None:
            raise CliError(f"no text was read from attachment {args.text} ({attachments[args.text].get('filename')!r})")
        return Output(content=text if text.endswith("\n") else text + "\n")
    if args.save:
        return _save(ctx, attachments, Path(args.save))
    parts: list[dict[str, Any]] = []
    for idx, att in enumerate(attachments):
        text = ctx.store.get_attachment_text(args.id, idx) if att.get("extractedText") else None
        parts.append(
            {
                "index": idx,
                "filename": att.get("filename") or "",
                "contentType": att.get("contentType"),
                "size": att.get("size"),
                "textChars": len(text or ""),
            }
        )
    errors = list((message.get("processing") or {}).get("attachmentErrors") or ())

    def lines() -> Iterator[str]:
        for part in parts:
            text = f"{part['textChars']} chars of text" if part["textChars"] else "no text"
            name = part["filename"] or "(no name)"
            yield f"{part['index']:>3}  {name}  {part['contentType']}  {human_size(part['size'])}  {text}"
        for error in errors:
            yield f"     not read: {error.get('filename') or '(no name)'}: {error.get('message')}"

    return Output({"messageId": message["messageId"], "parts": parts, "attachmentErrors": errors}, lines())


def _save(ctx: Context, attachments: list[Mapping[str, Any]], out: Path) -> Output:
    out.mkdir(parents=True, exist_ok=True)
    saved: list[dict[str, Any]] = []
    refused: list[str] = []
    used: set[str] = set()
    for idx, att in enumerate(attachments):
        data = ctx.store.get_attachment(ctx.args.id, idx)
        if data is None:
            continue
        name = safe_name(att.get("filename"), idx)
        if name in used:
            stem, dot, ext = name.rpartition(".")
            name = f"{stem}-{idx}.{ext}" if dot and stem else f"{name}-{idx}"
        used.add(name)
        target = out / name
        try:
            with open(target, "wb" if ctx.args.overwrite else "xb") as f:
                f.write(data)
        except FileExistsError:
            refused.append(str(target))
            continue
        saved.append({"index": idx, "path": str(target), "size": len(data)})
    text = [f"{s['index']:>3}  {s['path']}  {human_size(s['size'])}" for s in saved]
    text += [f"exists, not overwritten (--overwrite to replace): {path}" for path in refused]
    return Output({"saved": saved, "notOverwritten": refused}, text, EXIT_FAILED if refused else EXIT_OK)
