"""indexes.js: generated from aecs_mongo/pure/indexes.py, and run for real with mongosh.

The mongosh tests find ``node_modules/.bin/mongosh`` under the repository root (``npm install``)
or ``mongosh`` on PATH. Without it they skip, unless ``AECS_REQUIRE_MONGOSH=1`` (CI) makes that a
failure.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aecs_mongo.pure.indexes import (
    ATLAS_SEARCH_INDEX,
    ATLAS_VECTOR_INDEX_NAME,
    MAX_VECTOR_DIMENSIONS,
    VECTORS_COLLECTION,
    atlas_search_commands,
    atlas_search_indexes,
    atlas_vector_index,
    index_specs,
)
from aecs_mongo.pure.search_compile import atlas_search
from aecs_mongo.pure.search_query import Word

from .helpers.mongosh import find_mongosh

ROOT = Path(__file__).resolve().parents[1]
INDEXES_JS = ROOT / "indexes.js"
GENERATOR = ROOT / "scripts" / "gen_indexes_js.py"
TEXT_INDEX = "aecs_bodies_search"
LINE = re.compile(r"^(created|exists|skipped|FAILED) +(\S+) \(([^)]*)\)(?:: (.*))?$")


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_indexes_js", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_generator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(GENERATOR), *args], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False
    )


def js_array(text: str, const: str) -> list[Any]:
    """The entries of ``const NAME = [ ... ];`` in indexes.js (one JSON value per line)."""
    block = re.search(rf"^const {const} = \[\n(.*?)^\];$", text, re.M | re.S)
    assert block is not None, f"{const} not found in indexes.js"
    return [json.loads(line.strip().rstrip(",")) for line in block.group(1).splitlines()]


# --- the generator -----------------------------------------------------------------------------


def test_committed_indexes_js_is_current() -> None:
    generated = load_generator().render()
    assert INDEXES_JS.is_file(), "indexes.js is missing: run python scripts/gen_indexes_js.py"
    assert INDEXES_JS.read_text(encoding="utf-8") == generated, (
        "indexes.js is stale: run python scripts/gen_indexes_js.py and commit it"
    )


def test_generator_is_deterministic() -> None:
    gen = load_generator()
    assert gen.render() == gen.render() == load_generator().render()


def test_check_flag(tmp_path: Path) -> None:
    ok = run_generator("--check")
    assert ok.returncode == 0, ok.stderr
    stale = tmp_path / "indexes.js"
    stale.write_text(INDEXES_JS.read_text(encoding="utf-8").replace("aecs_messages_inbox", "aecs_messages_old"))
    result = run_generator("--check", "--output", str(stale))
    assert result.returncode == 1
    assert "stale" in result.stderr
    missing = run_generator("--check", "--output", str(tmp_path / "nothing.js"))
    assert missing.returncode == 1
    assert "missing" in missing.stderr
    written = run_generator("--output", str(stale))
    assert written.returncode == 0, written.stderr
    assert stale.read_text(encoding="utf-8") == INDEXES_JS.read_text(encoding="utf-8")


def test_indexes_js_data_is_index_specs() -> None:
    """The data block, with the default bucket substituted, is exactly index_specs()."""
    text = INDEXES_JS.read_text(encoding="utf-8")
    for bucket in ("aecs", "mail.blobs"):
        rebuilt = []
        for entry in js_array(text, "AECS_INDEXES"):
            collection = entry.get("collection") or f"{bucket}.{entry['bucketSuffix']}"
            keys = tuple((field, direction) for field, direction in entry["keys"])
            rebuilt.append((collection, entry["name"], keys, entry["options"], entry.get("text", False)))
        expected = [(s.collection, s.name, s.keys, s.options, s.is_text) for s in index_specs(bucket)]
        assert rebuilt == expected
    atlas = js_array(text, "AECS_ATLAS_INDEXES")
    assert atlas == [{"collection": s.collection, "model": s.model()} for s in atlas_search_indexes()]


def test_indexes_js_is_valid_javascript(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    result = subprocess.run([node, "--check", str(INDEXES_JS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# --- indexes.js logic under node, with a stub server (paths SecantusDB cannot reach) --------------

STUB = r"""
const fs = require("fs"), vm = require("vm");
const state = JSON.parse(process.argv[3]);
const out = [], calls = [];
const Long = (n) => ({ toNumber: () => n });  // how mongosh hands back int64 key values
for (const list of Object.values(state.indexes)) {
  for (const ix of list) for (const [f, d] of Object.entries(ix.key)) if (d === "LONG1") ix.key[f] = Long(1);
}
const collection = (name) => ({
  getIndexes: () => state.indexes[name] || [{ v: 2, key: { _id: 1 }, name: "_id_" }],
  createIndex: (key, options) => { calls.push(["createIndex", name, key, options]); return options.name; },
  dropIndex: (n) => { calls.push(["dropIndex", name, n]); },
  getSearchIndexes: (n) => (state.search[name] || []).filter((ix) => ix.name === n),
  createSearchIndex: (model) => { calls.push(["createSearchIndex", name, model]); return model.name; },
});
const database = {
  getCollection: collection,
  getCollectionNames: () => Object.keys(state.indexes),
  createCollection: (name) => { calls.push(["createCollection", name]); },
};
const sandbox = Object.assign({
  print: (...a) => out.push(a.join(" ")),
  quit: (code) => out.push("QUIT " + code),
  db: { getSiblingDB: (n) => { calls.push(["getSiblingDB", n]); return database; } },
}, state.settings);
vm.runInNewContext(fs.readFileSync(process.argv[2], "utf8"), sandbox);
console.log(JSON.stringify({ out, calls }));
"""


def run_stubbed(
    tmp_path: Path,
    indexes: dict[str, list[dict[str, Any]]] | None = None,
    search: dict[str, list[dict[str, Any]]] | None = None,
    **settings: Any,
) -> tuple[list[str], list[list[Any]]]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH")
    stub = tmp_path / "stub.js"
    stub.write_text(STUB)
    state = {"indexes": indexes or {}, "search": search or {}, "settings": settings}
    result = subprocess.run(
        [node, str(stub), str(INDEXES_JS), json.dumps(state)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    return data["out"], data["calls"]


def test_stubbed_existing_text_index_and_long_keys(tmp_path: Path) -> None:
    # how the server lists the text index: _fts/_ftsx in the key, the text fields as weights
    [text_spec] = [s for s in index_specs() if s.name == TEXT_INDEX]
    assert [f for f, d in text_spec.keys if d != "text"] == ["mailboxId"]
    weights = text_spec.text_weights()
    out, calls = run_stubbed(
        tmp_path,
        {
            "bodies": [
                {"key": {"mailboxId": "LONG1", "_fts": "text", "_ftsx": 1}, "name": TEXT_INDEX, "weights": weights}
            ],
            "uidls": [{"key": {"mailboxId": "LONG1", "uidl": 1}, "name": "aecs_uidls_mailbox", "unique": True}],
        },
        dbName="mail",
    )
    assert ["getSiblingDB", "mail"] in calls
    assert f"exists   {TEXT_INDEX} (bodies)" in out
    assert "exists   aecs_uidls_mailbox (uidls)" in out
    assert not any(line.startswith("QUIT") for line in out), out
    created = [c[3]["name"] for c in calls if c[0] == "createIndex"]
    assert created == [s.name for s in index_specs() if s.name not in (TEXT_INDEX, "aecs_uidls_mailbox")]
    # what createIndex is given: the key order and the options of index_specs()
    for call, spec in zip(
        (c for c in calls if c[0] == "createIndex"), (s for s in index_specs() if s.name in created), strict=True
    ):
        assert list(call[2].items()) == list(spec.keys)
        assert call[3] == {"name": spec.name, **spec.options}


def test_stubbed_older_text_index_is_dropped_and_created(tmp_path: Path) -> None:
    # an earlier release's text index (subject and clean, weighing 1): one text index per
    # collection, keys unchangeable in place, so indexes.js drops it before creating the new one
    old = {"key": {"mailboxId": 1, "_fts": "text", "_ftsx": 1}, "name": TEXT_INDEX}
    old["weights"] = {"subject": 1, "clean": 1}
    out, calls = run_stubbed(tmp_path, {"bodies": [old]})
    assert not any(line.startswith("QUIT") for line in out), out
    assert any(line.startswith(f"created  {TEXT_INDEX} (bodies): replaced the text index on") for line in out), out
    order = [[*c[:2], c[3]["name"] if c[0] == "createIndex" else c[2]] for c in calls if c[1:2] == ["bodies"]]
    assert order == [["dropIndex", "bodies", TEXT_INDEX], ["createIndex", "bodies", TEXT_INDEX]]


def test_stubbed_text_index_on_other_fields_fails(tmp_path: Path) -> None:
    out, _ = run_stubbed(
        tmp_path,
        {"bodies": [{"key": {"mailboxId": 1, "_fts": "text", "_ftsx": 1}, "name": TEXT_INDEX, "weights": {"text": 1}}]},
    )
    assert any(line.startswith(f"FAILED   {TEXT_INDEX} (bodies): a text index of that name") for line in out), out
    assert out[-1] == "QUIT 1"


def test_stubbed_atlas(tmp_path: Path) -> None:
    out, calls = run_stubbed(
        tmp_path,
        {"messages": [], "bodies": []},
        {"bodies": [{"name": "aecs_bodies_atlas", "type": "search", "status": "READY"}]},
        atlas=True,
        numDimensions=1024,
    )
    assert not any(line.startswith("QUIT") for line in out), out
    assert any(line.startswith("exists   aecs_bodies_atlas (bodies, Atlas Search): status READY") for line in out)
    assert any(line.startswith("created  aecs_vectors_atlas (vectors, Atlas Vector Search)") for line in out)
    assert ["createCollection", "vectors"] in calls
    [create] = [c for c in calls if c[0] == "createSearchIndex"]
    assert create[1:] == ["vectors", atlas_vector_index(1024).model()]


def test_stubbed_atlas_type_clash_fails(tmp_path: Path) -> None:
    out, calls = run_stubbed(
        tmp_path,
        {"bodies": [], "vectors": []},
        {"vectors": [{"name": "aecs_vectors_atlas", "type": "search", "status": "READY"}]},
        atlas="true",
    )
    assert any(line.startswith("FAILED   aecs_vectors_atlas (vectors, Atlas Vector Search)") for line in out), out
    assert [c[2]["name"] for c in calls if c[0] == "createSearchIndex"] == ["aecs_bodies_atlas"]
    assert out[-1] == "QUIT 1"


def test_stubbed_no_atlas_by_default(tmp_path: Path) -> None:
    out, calls = run_stubbed(tmp_path)
    assert not [c for c in calls if c[0] in ("createSearchIndex", "createCollection")]
    assert out[0] == 'aecs indexes.js: database "aecs", GridFS bucket "aecs"'


# --- the Atlas definitions (shape only: nothing here talks to Atlas) -------------------------------


def test_atlas_search_index_shape() -> None:
    spec = ATLAS_SEARCH_INDEX
    assert (spec.collection, spec.name, spec.type) == ("bodies", "aecs_bodies_atlas", "search")
    mappings = spec.definition["mappings"]
    assert mappings["dynamic"] is False
    assert mappings["fields"] == {
        "subject": {"type": "string", "analyzer": "lucene.standard"},
        "clean": {"type": "string", "analyzer": "lucene.standard"},
        "attachmentTexts": {
            "type": "document",
            "fields": {"text": {"type": "string", "analyzer": "lucene.standard"}},
        },
        "mailboxId": {"type": "token"},
    }

    def mapped(path: str) -> dict[str, Any]:  # a dotted path through "document" fields
        *outer, last = path.split(".")
        fields = mappings["fields"]
        for name in outer:
            assert fields[name]["type"] == "document"
            fields = fields[name]["fields"]
        return dict(fields[last])

    # every path the $search pipeline queries or filters on is mapped, with the right type
    stage = atlas_search(Word("q"), "alice").text
    assert stage["index"] == spec.name
    assert stage["compound"]["must"][0]["text"]["path"] == ["subject", "clean", "attachmentTexts.text"]
    for path in [*stage["compound"]["must"][0]["text"]["path"], "attachmentTexts.text"]:
        assert mapped(path)["type"] == "string"
    assert mappings["fields"][stage["compound"]["filter"][0]["equals"]["path"]]["type"] == "token"


def test_atlas_vector_index_shape() -> None:
    spec = atlas_vector_index()
    assert (spec.collection, spec.name, spec.type) == (VECTORS_COLLECTION, ATLAS_VECTOR_INDEX_NAME, "vectorSearch")
    assert (spec.collection, spec.name) == ("vectors", "aecs_vectors_atlas")
    fields = spec.definition["fields"]
    assert set(spec.definition) == {"fields"}
    vectors = [f for f in fields if f["type"] == "vector"]
    assert vectors == [{"type": "vector", "path": "embedding", "numDimensions": 1536, "similarity": "cosine"}]
    filters = [f for f in fields if f["type"] == "filter"]
    assert filters == [{"type": "filter", "path": "mailboxId"}, {"type": "filter", "path": "threadKey"}]
    assert len(fields) == len(vectors) + len(filters)
    assert atlas_vector_index(768).definition["fields"][0]["numDimensions"] == 768
    assert atlas_vector_index(MAX_VECTOR_DIMENSIONS).definition["fields"][0]["numDimensions"] == MAX_VECTOR_DIMENSIONS


@pytest.mark.parametrize("bad", [0, -1, MAX_VECTOR_DIMENSIONS + 1])
def test_atlas_vector_index_rejects_bad_dimensions(bad: int) -> None:
    with pytest.raises(ValueError):
        atlas_vector_index(bad)


@pytest.mark.parametrize("bad", [True, 1.5, "1536", None])
def test_atlas_vector_index_rejects_non_int(bad: Any) -> None:
    with pytest.raises(TypeError):
        atlas_vector_index(bad)


def test_atlas_search_commands() -> None:
    commands = atlas_search_commands(384)
    assert [collection for collection, _ in commands] == ["bodies", "vectors"]
    (_, search), (_, vector) = commands
    assert search == {
        "createSearchIndexes": "bodies",
        "indexes": [{"name": "aecs_bodies_atlas", "definition": ATLAS_SEARCH_INDEX.definition}],
    }
    assert vector["createSearchIndexes"] == "vectors"
    [model] = vector["indexes"]
    assert model["name"] == "aecs_vectors_atlas"
    assert model["type"] == "vectorSearch"
    assert model["definition"]["fields"][0]["numDimensions"] == 384
    assert [f["path"] for f in model["definition"]["fields"]] == ["embedding", "mailboxId", "threadKey"]
    # the commands are copies: sending (or editing) one cannot change the module's definitions
    before = copy.deepcopy(ATLAS_SEARCH_INDEX.definition)
    search["indexes"][0]["definition"]["mappings"]["fields"].clear()
    assert before == ATLAS_SEARCH_INDEX.definition
    assert atlas_search_commands()[1][1]["indexes"][0]["definition"]["fields"][0]["numDimensions"] == 1536


def test_atlas_names_do_not_clash_with_index_names() -> None:
    names = {spec.name for spec in index_specs()}
    for spec in atlas_search_indexes():
        assert spec.name.startswith("aecs_")
        assert spec.name not in names


# --- running indexes.js with mongosh ----------------------------------------------------------


def uri_with_db(uri: str, db_name: str) -> str:
    """``uri`` with ``db_name`` as its path; credentials keep authenticating where they did."""
    match = re.match(r"^(mongodb(?:\+srv)?://[^/?]*)(?:/([^?]*))?(?:\?(.*))?$", uri)
    assert match is not None, f"not a MongoDB URI: {uri}"
    prefix, path, query = match.groups()
    params = [p for p in (query or "").split("&") if p]
    if "@" in prefix and not any(p.lower().startswith("authsource=") for p in params):
        params.append(f"authSource={path or 'admin'}")
    return f"{prefix}/{db_name}" + ("?" + "&".join(params) if params else "")


@dataclass
class Run:
    returncode: int
    output: str
    lines: dict[str, tuple[str, str, str | None]]  # index name -> (status, collection, detail)

    def names(self, status: str) -> list[str]:
        return [name for name, (s, _, _) in self.lines.items() if s == status]


def run_indexes_js(mongosh: str, uri: str, settings: str) -> Run:
    result = subprocess.run(
        [mongosh, "--quiet", "--norc", uri, "--eval", settings, str(INDEXES_JS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
        check=False,
        env={**os.environ, "MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING": "1"},  # no usage reports from tests
    )
    output = result.stdout + result.stderr
    lines: dict[str, tuple[str, str, str | None]] = {}
    for line in result.stdout.splitlines():
        match = LINE.match(line)
        if match:
            status, name, collection, detail = match.groups()
            assert name not in lines, f"{name} reported twice:\n{output}"
            lines[name] = (status, collection, detail)
    return Run(result.returncode, output, lines)


def index_info(db: Any) -> dict[str, dict[str, dict[str, Any]]]:
    """collection -> index name -> the index document (key order kept, ``ns`` dropped), for every
    collection of the database (``journal_barrier`` too, on SecantusDB: both make it there)."""
    info: dict[str, dict[str, dict[str, Any]]] = {}
    for collection in sorted(db.list_collection_names()):
        info[collection] = {}
        for ix in db[collection].list_indexes():
            doc = {k: v for k, v in ix.items() if k != "ns"}
            doc["key"] = list(ix["key"].items())
            info[collection][ix["name"]] = doc
    return info


@pytest.mark.server
@pytest.mark.ci_every_server
def test_indexes_js_twice_matches_ensure_indexes(servers: Any, backend: str, db: Any) -> None:
    from aecs_mongo import MessageStore

    mongosh = find_mongosh()
    uri = uri_with_db(servers.uri(backend), db.name)
    settings = f'var dbName="{db.name}"'
    expected = [spec.name for spec in index_specs()]

    first = run_indexes_js(mongosh, uri, settings)
    assert first.returncode == 0, first.output
    assert list(first.lines) == expected, first.output
    assert not first.names("FAILED") and not first.names("exists"), first.output
    assert set(first.names("skipped")) <= {TEXT_INDEX}, first.output
    for name, (_, collection, _) in first.lines.items():
        assert collection == next(spec.collection for spec in index_specs() if spec.name == name)

    second = run_indexes_js(mongosh, uri, settings)
    assert second.returncode == 0, second.output
    assert list(second.lines) == expected, second.output
    # everything the first run created now exists; a refused text index is refused again
    assert second.names("exists") == first.names("created"), second.output
    assert second.names("skipped") == first.names("skipped"), second.output
    assert "aecs indexes.js: 0 created," in second.output

    client = servers.client(backend)
    db2 = client[db.name + "_py"]
    try:
        report = MessageStore(db2, mailbox_id="x").ensure_indexes()
        assert report.created == first.names("created")
        assert sorted(report.skipped) == sorted(first.names("skipped"))
        assert index_info(db) == index_info(db2)
    finally:
        client.drop_database(db2.name)


@pytest.mark.server
@pytest.mark.ci_every_server
def test_indexes_js_reports_text_index_refusal(servers: Any, backend: str, db: Any) -> None:
    if backend == "uri":
        pytest.skip("the text-index refusal is SecantusDB's; a real deployment may well create the index")
    mongosh = find_mongosh()
    run = run_indexes_js(mongosh, uri_with_db(servers.uri(backend), db.name), f'var dbName="{db.name}"')
    assert run.returncode == 0, run.output
    status, collection, detail = run.lines[TEXT_INDEX]
    assert (status, collection) == ("skipped", "bodies"), run.output
    assert detail is not None
    assert "the server refused the text index" in detail
    assert "text indexes are not supported by SecantusDB" in detail
    assert "code 67" in detail
    assert run.names("FAILED") == []


@pytest.mark.server
@pytest.mark.ci_every_server
def test_indexes_js_fails_loudly_on_a_conflicting_index(servers: Any, backend: str, db: Any) -> None:
    mongosh = find_mongosh()
    db.messages.create_index([("mailboxId", 1), ("ts", 1)], name="aecs_messages_inbox")
    db.uidls.create_index([("mailboxId", 1), ("uidl", 1)], name="aecs_uidls_mailbox")  # not unique
    run = run_indexes_js(mongosh, uri_with_db(servers.uri(backend), db.name), f'var dbName="{db.name}"')
    assert run.returncode == 1, run.output
    status, _, detail = run.lines["aecs_messages_inbox"]
    assert status == "FAILED"
    assert detail is not None and "exists with keys" in detail
    status, _, detail = run.lines["aecs_uidls_mailbox"]
    assert status == "FAILED"
    assert detail is not None and "unique" in detail
    # the rest is still done, and the summary says what failed
    assert "aecs_messages_thread" in run.names("created")
    assert "2 FAILED" in run.output


@pytest.mark.server
@pytest.mark.ci_every_server
def test_indexes_js_bucket_name(servers: Any, backend: str, db: Any) -> None:
    mongosh = find_mongosh()
    uri = uri_with_db(servers.uri(backend), db.name)
    run = run_indexes_js(mongosh, uri, f'var dbName="{db.name}"; var bucketName="mailblobs"')
    assert run.returncode == 0, run.output
    assert run.lines["filename_1_uploadDate_1"][:2] == ("created", "mailblobs.files")
    assert run.lines["files_id_1_n_1"][:2] == ("created", "mailblobs.chunks")
    chunks = {ix["name"]: ix for ix in db["mailblobs.chunks"].list_indexes()}
    assert list(chunks["files_id_1_n_1"]["key"].items()) == [("files_id", 1), ("n", 1)]
    assert chunks["files_id_1_n_1"].get("unique") is True
    files = {ix["name"]: ix for ix in db["mailblobs.files"].list_indexes()}
    assert list(files["filename_1_uploadDate_1"]["key"].items()) == [("filename", 1), ("uploadDate", 1)]
    assert "aecs.files" not in db.list_collection_names()


@pytest.mark.server
@pytest.mark.ci_every_server
def test_indexes_js_atlas_mode_fails_loudly_off_atlas(servers: Any, backend: str, db: Any) -> None:
    if backend == "uri":
        pytest.skip("MONGODB_URI may be Atlas, where the search indexes would really be created")
    mongosh = find_mongosh()
    uri = uri_with_db(servers.uri(backend), db.name)
    run = run_indexes_js(mongosh, uri, f'var dbName="{db.name}"; var atlas=true; var numDimensions=768')
    assert run.returncode == 1, run.output
    assert "numDimensions 768" in run.output
    wanted = {"aecs_bodies_atlas": "bodies, Atlas Search", "aecs_vectors_atlas": "vectors, Atlas Vector Search"}
    for name, collection in wanted.items():
        status, where, detail = run.lines[name]
        assert (status, where) == ("FAILED", collection), run.output
        assert detail is not None and "CommandNotSupported" in detail
    assert run.names("created") == [spec.name for spec in index_specs() if spec.name != TEXT_INDEX]


@pytest.mark.one_server  # indexes.js checks its settings before it sends any command
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ('var dbName="a.b"', "dbName must be"),
        ('var bucketName=""', "bucketName must be"),
        ("var atlas=1", "atlas must be true or false"),
        ("var numDimensions=0", "numDimensions must be an integer"),
        ('var numDimensions="many"', "numDimensions must be an integer"),
    ],
)
def test_indexes_js_rejects_bad_settings(servers: Any, backend: str, db: Any, settings: str, message: str) -> None:
    mongosh = find_mongosh()
    run = run_indexes_js(mongosh, uri_with_db(servers.uri(backend), db.name), settings)
    assert run.returncode == 2, run.output
    assert message in run.output
    assert run.lines == {}


def test_uri_with_db() -> None:
    assert (
        uri_with_db("mongodb://127.0.0.1:5/?directConnection=true", "t")
        == "mongodb://127.0.0.1:5/t?directConnection=true"
    )
    assert uri_with_db("mongodb://h", "t") == "mongodb://h/t"
    assert uri_with_db("mongodb://u:p@h/admin?w=1", "t") == "mongodb://u:p@h/t?w=1&authSource=admin"
    assert uri_with_db("mongodb+srv://u:p@c.example.net/", "t") == "mongodb+srv://u:p@c.example.net/t?authSource=admin"
    assert uri_with_db("mongodb://u:p@h/?authSource=x", "t") == "mongodb://u:p@h/t?authSource=x"
