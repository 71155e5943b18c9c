// postal-mime's parse of every .eml file in a directory, one JSON line per file, for
// scripts/differential.py (an independent reference: the parser of the TypeScript AECS-1
// reference implementation). Run with TZ=UTC: postal-mime reads zone-less dates in local time.
// node scripts/postal_mime_json.mjs DIR  ->  {"file": ..., "from": ..., ...} per line, sorted by name
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import PostalMime from "postal-mime";

// True when some text node had no part of `own` type, so postal-mime rendered one from the
// other type: such a rendering is its own converter's output, not a part's content.
function rendered(parser, own) {
  let found = false;
  parser.textMap.forEach((entry) => {
    if (!entry[own] && entry[own === "plain" ? "html" : "plain"]) found = true;
  });
  return found;
}

const dir = process.argv[2];
const files = readdirSync(dir).filter((f) => f.endsWith(".eml")).sort();
const out = [];
for (const file of files) {
  const parser = new PostalMime();
  try {
    const m = await parser.parse(readFileSync(join(dir, file)));
    out.push(
      JSON.stringify({
        file,
        from: m.from ?? null,
        to: m.to ?? [],
        cc: m.cc ?? [],
        subject: m.subject ?? null,
        date: m.date ?? null,
        messageId: m.messageId ?? null,
        text: m.text ?? null,
        textRendered: rendered(parser, "plain"),
        html: m.html ?? null,
        htmlRendered: rendered(parser, "html"),
        attachments: m.attachments.map((a) => ({
          filename: a.filename,
          mimeType: a.mimeType,
          disposition: a.disposition,
          size: a.content.byteLength ?? a.content.length,
        })),
      }),
    );
  } catch (e) {
    out.push(JSON.stringify({ file, error: String(e) }));
  }
}
process.stdout.write(out.join("\n") + "\n");
