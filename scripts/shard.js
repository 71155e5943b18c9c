// Shard the aecs-mongo collections of one database so that every query is targeted by mailboxId.
//
//   mongosh "mongodb://mongos.example.net:27017/" --eval 'var dbName="mail"' scripts/shard.js
//
// Settings (with --eval, before the file): dbName (default "aecs"), bucketName (default "aecs"),
// dryRun (true: print the plan, change nothing). Run indexes.js first. Then construct the stores
// with MessageStore(..., sharded=True) so point reads carry the shard key.
//
// Shard keys (README, "Sharding"):
//   messages, bodies, threads, vectors  { mailboxId: 1, _id: 1 }  ranged
//   vector_blocks                       { mailboxId: 1, _id: 1 }  ranged
//   uidls                               { mailboxId: 1, uidl: 1 }  ranged (its unique index)
//   <bucket>.chunks                     { files_id: 1, n: 1 }      ranged (the GridFS recommendation)
//   <bucket>.files                      not sharded (a few hundred bytes per blob)
//
// Exit status: 0 when every step succeeded (or dryRun), 1 when the server refused a step (for
// example a replica set or a test server: sharding needs a mongos), 2 for bad settings.

(function () {
  const db_ = (typeof dbName !== "undefined") ? dbName : "aecs";
  const bucket = (typeof bucketName !== "undefined") ? bucketName : "aecs";
  const dry = (typeof dryRun !== "undefined") && dryRun === true;
  if (typeof db_ !== "string" || !/^[^\/\\. "$*<>:|?]+$/.test(db_) || typeof bucket !== "string" || !bucket) {
    print("shard.js: dbName and bucketName must be plain names");
    quit(2);
  }
  const target = db.getSiblingDB(db_);
  const plan = [
    ["messages", { mailboxId: 1, _id: 1 }],
    ["bodies", { mailboxId: 1, _id: 1 }],
    ["threads", { mailboxId: 1, _id: 1 }],
    ["vectors", { mailboxId: 1, _id: 1 }],
    ["vector_blocks", { mailboxId: 1, _id: 1 }],
    ["uidls", { mailboxId: 1, uidl: 1 }],
    [bucket + ".chunks", { files_id: 1, n: 1 }],
  ];
  let refused = 0;

  function step(label, fn) {
    if (dry) {
      print("plan     " + label);
      return;
    }
    try {
      const result = fn();
      if (result && result.ok === 0) throw new Error(result.errmsg || JSON.stringify(result));
      print("ok       " + label);
    } catch (e) {
      refused += 1;
      print("refused  " + label + ": " + (e.codeName ? e.codeName + ": " : "") + e.message);
    }
  }

  const hello = db.adminCommand({ hello: 1 });
  if (hello.msg !== "isdbgrid") {
    print("note     this server is not a mongos (a sharded cluster's router): expect every step to be refused");
  }
  step("enableSharding " + db_, function () {
    return db.adminCommand({ enableSharding: db_ });
  });
  // an index whose keys start with the shard key's (indexes.js made some already)
  function hasPrefixIndex(name, key) {
    const wanted = Object.keys(key);
    let indexes = [];
    try {
      indexes = target.getCollection(name).getIndexes();
    } catch (e) {
      return false; // the collection does not exist yet
    }
    return indexes.some(function (ix) {
      const have = Object.keys(ix.key);
      return wanted.every(function (k, i) { return have[i] === k && ix.key[k] === key[k]; });
    });
  }
  for (const [name, key] of plan) {
    const ns = db_ + "." + name;
    if (!dry && hasPrefixIndex(name, key)) {
      print("exists   index " + ns + " " + JSON.stringify(key));
    } else {
      step("index " + ns + " " + JSON.stringify(key), function () {
        return target.getCollection(name).createIndex(key, { name: "aecs_shard_key" });
      });
    }
    step("shardCollection " + ns + " " + JSON.stringify(key), function () {
      return db.adminCommand({ shardCollection: ns, key: key });
    });
  }
  print((dry ? "dry run, " : "") + refused + " refused");
  if (refused > 0) quit(1);
})();
