// Real-client compatibility tests: PouchDB (http adapter + replication)
// against a Settee server started by this file.
//
// Run:  node --test tests/clients/pouchdb.test.mjs
// Env:  SETTEE_BIN  path to the settee binary
//                   (default: the workspace's target/release/settee)
//       SETTEE_URL  if set (e.g. http://127.0.0.1:5984), use that already
//                   running server instead of spawning one; it must accept
//                   admin:secret. Handy to check the tests against CouchDB.
//       SETTEE_CLUSTER=1  SETTEE_URL is a cluster member (tests/cluster/with_cluster.py):
//                   a clustered _changes keeps no order across ranges (as CouchDB's),
//                   so the feed's rows are compared as sets there.
//
// Every test uses its own database name so tests are independent.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import PouchDB from 'pouchdb';
import MemoryAdapter from 'pouchdb-adapter-memory';
import PouchFind from 'pouchdb-find';

PouchDB.plugin(MemoryAdapter);
PouchDB.plugin(PouchFind);

const ADMIN = { username: 'admin', password: 'secret' };
const CLUSTER = process.env.SETTEE_CLUSTER === '1';
// A feed's ids: in feed order on one node, as a set on a cluster (no order across ranges).
const feedIds = (results) => (CLUSTER ? results.map((r) => r.id).sort() : results.map((r) => r.id));
const expectIds = (ids) => (CLUSTER ? [...ids].sort() : ids);
const AUTH_HEADER = 'Basic ' + Buffer.from('admin:secret').toString('base64');
const SETTEE_BIN = process.env.SETTEE_BIN ||
  path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'target', 'release', 'settee');

let baseUrl = null;   // e.g. http://127.0.0.1:12345
let server = null;    // child process
let dataDir = null;
let serverLog = '';

// Every HTTP request PouchDB makes goes through this, so failures can show
// which request the server got wrong, and tests can assert on the traffic.
const requestLog = [];
function recordingFetch(url, opts) {
  const method = (opts && opts.method) || 'GET';
  return PouchDB.fetch(url, opts).then((res) => {
    requestLog.push({ method, url: String(url), status: res.status });
    return res;
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitUp(url, child, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  let lastErr = null;
  while (Date.now() < deadline) {
    if (child && child.exitCode !== null) {
      throw new Error(`settee exited early with code ${child.exitCode}\n${serverLog}`);
    }
    try {
      const res = await fetch(url + '/_up');
      if (res.status === 200) {
        await res.text();
        return;
      }
      lastErr = new Error(`GET /_up -> ${res.status}`);
    } catch (e) {
      lastErr = e;
    }
    await sleep(100);
  }
  throw new Error(`settee did not come up at ${url}: ${lastErr}\n${serverLog}`);
}

before(async () => {
  if (process.env.SETTEE_URL) {
    baseUrl = process.env.SETTEE_URL.replace(/\/+$/, '');
    await waitUp(baseUrl, null, 10000);
    return;
  }
  if (!fs.existsSync(SETTEE_BIN)) {
    throw new Error(`settee binary not found at ${SETTEE_BIN} (set SETTEE_BIN)`);
  }
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'settee-pouchdb-'));
  const port = await freePort();
  baseUrl = `http://127.0.0.1:${port}`;
  server = spawn(SETTEE_BIN, [
    'serve', '--data-dir', dataDir, '--bind', `127.0.0.1:${port}`,
    '--admin', 'admin:secret',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  const keep = (chunk) => {
    serverLog += chunk.toString();
    if (serverLog.length > 20000) serverLog = serverLog.slice(-20000);
  };
  server.stdout.on('data', keep);
  server.stderr.on('data', keep);
  await waitUp(baseUrl, server);
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    const t = setTimeout(() => server.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(t);
  }
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

process.on('exit', () => {
  if (server && server.exitCode === null) server.kill('SIGKILL');
});

let dbCounter = 0;
function uniqueName(prefix) {
  dbCounter += 1;
  return `${prefix}-${process.pid}-${dbCounter}`;
}

function remoteDb(name) {
  return new PouchDB(`${baseUrl}/${name}`, { auth: ADMIN, fetch: recordingFetch });
}

function memoryDb(name) {
  return new PouchDB(uniqueName(name), { adapter: 'memory' });
}

// Raw HTTP helper, for checks PouchDB would hide (it silently falls back).
async function raw(method, p, body) {
  const res = await fetch(baseUrl + p, {
    method,
    headers: {
      Authorization: AUTH_HEADER,
      Accept: 'application/json',
      ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

async function rejects(promise, check) {
  try {
    await promise;
  } catch (err) {
    check(err);
    return err;
  }
  assert.fail('expected promise to reject');
}

const REV_RE = /^\d+-[0-9a-f]{32}$/;
const hex32 = (c) => c.repeat(32);

function failedRequestsSince(mark, allowed = () => false) {
  return requestLog.slice(mark).filter((r) => r.status >= 400 && !allowed(r));
}

// ---------------------------------------------------------------------------

test('server root and database creation via PouchDB setup', async () => {
  const rootRes = await fetch(baseUrl + '/');
  assert.equal(rootRes.status, 200);
  const root = await rootRes.json();
  assert.equal(root.couchdb, 'Welcome');
  assert.equal(typeof root.version, 'string');

  const name = uniqueName('pouch-setup');
  const db = remoteDb(name);
  const info = await db.info(); // GET /db -> 404 -> PUT /db -> GET /db
  assert.equal(info.db_name, name);
  assert.equal(info.doc_count, 0);
  assert.equal(info.doc_del_count, 0);
  assert.ok('update_seq' in info, 'db info has update_seq');
  await db.destroy();
  const gone = await raw('GET', `/${name}`);
  assert.equal(gone.status, 404);
  assert.equal(gone.json.error, 'not_found');
});

test('put / get / update / remove a document', async () => {
  const db = remoteDb(uniqueName('pouch-crud'));

  const r1 = await db.put({ _id: 'doc1', title: 'hello', n: 1, nested: { a: [1, 2, { b: null }] } });
  assert.equal(r1.ok, true);
  assert.equal(r1.id, 'doc1');
  assert.match(r1.rev, REV_RE);
  assert.ok(r1.rev.startsWith('1-'));

  const d1 = await db.get('doc1');
  assert.deepEqual(d1, {
    _id: 'doc1', _rev: r1.rev, title: 'hello', n: 1, nested: { a: [1, 2, { b: null }] },
  });

  // update
  d1.n = 2;
  const r2 = await db.put(d1);
  assert.ok(r2.rev.startsWith('2-'));
  const d2 = await db.get('doc1');
  assert.equal(d2.n, 2);
  assert.equal(d2._rev, r2.rev);

  // stale revision -> 409 conflict
  await rejects(db.put({ _id: 'doc1', _rev: r1.rev, n: 99 }), (err) => {
    assert.equal(err.status, 409);
    assert.equal(err.name, 'conflict');
  });
  // creating an existing doc without _rev -> 409
  await rejects(db.put({ _id: 'doc1', n: 100 }), (err) => {
    assert.equal(err.status, 409);
  });

  // revision history
  const withRevs = await db.get('doc1', { revs: true });
  assert.equal(withRevs._revisions.start, 2);
  assert.deepEqual(withRevs._revisions.ids,
    [r2.rev.split('-')[1], r1.rev.split('-')[1]]);

  // revs_info lists the whole branch, newest first
  const ri = await db.get('doc1', { revs_info: true });
  assert.deepEqual(ri._revs_info.map((x) => x.rev), [r2.rev, r1.rev]);
  assert.equal(ri._revs_info[0].status, 'available');

  // remove
  const r3 = await db.remove(d2);
  assert.equal(r3.ok, true);
  assert.ok(r3.rev.startsWith('3-'));
  await rejects(db.get('doc1'), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.name, 'not_found');
    assert.equal(err.reason, 'deleted');
  });
  const tomb = await db.get('doc1', { rev: r3.rev });
  assert.equal(tomb._deleted, true);
  assert.equal(tomb._rev, r3.rev);

  // a never-existing doc
  await rejects(db.get('nope'), (err) => {
    assert.equal(err.status, 404);
    assert.equal(err.reason, 'missing');
  });

  // recreate a deleted doc: continues the deleted branch (4-)
  const r4 = await db.put({ _id: 'doc1', again: true });
  assert.ok(r4.rev.startsWith('4-'), `recreated rev ${r4.rev} should be 4-`);

  // post -> server generated id
  const rp = await db.post({ kind: 'posted' });
  assert.equal(rp.ok, true);
  assert.ok(rp.id.length > 0);
  const posted = await db.get(rp.id);
  assert.equal(posted.kind, 'posted');

  // ids needing URL encoding
  const weird = 'a b/c?d&e+f%g:é';
  await db.put({ _id: weird, w: 1 });
  const gw = await db.get(weird);
  assert.equal(gw._id, weird);
  assert.equal(gw.w, 1);

  const info = await db.info();
  assert.equal(info.doc_count, 3);       // doc1, posted, weird
  assert.equal(info.doc_del_count, 0);
  await db.destroy();
});

test('old revision bodies stay readable until compaction', async () => {
  // CouchDB keeps the body of a non-leaf revision until the database is
  // compacted: GET ?rev=<old> returns it and revs_info says "available".
  const db = remoteDb(uniqueName('pouch-oldrev'));
  const r1 = await db.put({ _id: 'doc', n: 1 });
  const r2 = await db.put({ _id: 'doc', _rev: r1.rev, n: 2 });
  const ri = await db.get('doc', { revs_info: true });
  assert.deepEqual(ri._revs_info, [
    { rev: r2.rev, status: 'available' },
    { rev: r1.rev, status: 'available' },
  ]);
  const old = await db.get('doc', { rev: r1.rev });
  assert.equal(old._rev, r1.rev);
  assert.equal(old.n, 1);
  await db.destroy();
});

test('bulkDocs + allDocs (include_docs, keys, startkey/endkey, limit, skip, descending)', async () => {
  const db = remoteDb(uniqueName('pouch-bulk'));
  const docs = [];
  for (let i = 9; i >= 0; i--) docs.push({ _id: `doc-${String(i).padStart(2, '0')}`, n: i });
  const res = await db.bulkDocs(docs);
  assert.equal(res.length, 10);
  for (let i = 0; i < res.length; i++) {
    assert.equal(res[i].ok, true);
    assert.equal(res[i].id, docs[i]._id, 'results in request order');
    assert.match(res[i].rev, REV_RE);
  }
  const revOf = Object.fromEntries(res.map((r) => [r.id, r.rev]));

  // plain
  const all = await db.allDocs();
  assert.equal(all.total_rows, 10);
  assert.equal(all.offset, 0);
  assert.deepEqual(all.rows.map((r) => r.id),
    Array.from({ length: 10 }, (_, i) => `doc-0${i}`));
  for (const row of all.rows) {
    assert.equal(row.key, row.id);
    assert.deepEqual(row.value, { rev: revOf[row.id] });
    assert.equal(row.doc, undefined);
  }

  // include_docs
  const withDocs = await db.allDocs({ include_docs: true });
  for (const row of withDocs.rows) {
    assert.deepEqual(row.doc, { _id: row.id, _rev: revOf[row.id], n: Number(row.id.slice(-2)) });
  }

  // startkey / endkey (inclusive)
  const range = await db.allDocs({ startkey: 'doc-02', endkey: 'doc-05' });
  assert.deepEqual(range.rows.map((r) => r.id), ['doc-02', 'doc-03', 'doc-04', 'doc-05']);
  assert.equal(range.total_rows, 10);
  assert.equal(range.offset, 2);

  // limit / skip
  const lim = await db.allDocs({ limit: 3 });
  assert.deepEqual(lim.rows.map((r) => r.id), ['doc-00', 'doc-01', 'doc-02']);
  const skipped = await db.allDocs({ limit: 3, skip: 2 });
  assert.deepEqual(skipped.rows.map((r) => r.id), ['doc-02', 'doc-03', 'doc-04']);
  assert.equal(skipped.offset, 2);

  // descending
  const desc = await db.allDocs({ descending: true, limit: 3 });
  assert.deepEqual(desc.rows.map((r) => r.id), ['doc-09', 'doc-08', 'doc-07']);
  const descRange = await db.allDocs({ descending: true, startkey: 'doc-05', endkey: 'doc-02' });
  assert.deepEqual(descRange.rows.map((r) => r.id), ['doc-05', 'doc-04', 'doc-03', 'doc-02']);

  // delete one, update one (bulk), plus a bulk conflict
  const upd = await db.bulkDocs([
    { _id: 'doc-03', _rev: revOf['doc-03'], _deleted: true },
    { _id: 'doc-04', _rev: revOf['doc-04'], n: 40 },
    { _id: 'doc-05', _rev: '1-' + hex32('0'), n: 50 }, // wrong rev
  ]);
  assert.equal(upd[0].ok, true);
  assert.equal(upd[1].ok, true);
  assert.ok(upd[1].rev.startsWith('2-'));
  assert.equal(upd[2].status, 409);
  assert.equal(upd[2].error, 'conflict');
  assert.equal(upd[2].id, 'doc-05');

  // keys: given order, missing and deleted rows
  const byKeys = await db.allDocs({ keys: ['doc-04', 'doc-01', 'missing', 'doc-03'], include_docs: true });
  assert.equal(byKeys.rows.length, 4);
  assert.equal(byKeys.rows[0].id, 'doc-04');
  assert.equal(byKeys.rows[0].doc.n, 40);
  assert.equal(byKeys.rows[0].value.rev, upd[1].rev);
  assert.equal(byKeys.rows[1].id, 'doc-01');
  assert.equal(byKeys.rows[1].doc.n, 1);
  assert.equal(byKeys.rows[2].key, 'missing');
  assert.equal(byKeys.rows[2].error, 'not_found');
  assert.equal(byKeys.rows[3].id, 'doc-03');
  assert.deepEqual(byKeys.rows[3].value, { rev: upd[0].rev, deleted: true });
  assert.equal(byKeys.rows[3].doc, null);

  // deleted doc gone from the plain listing
  const after = await db.allDocs();
  assert.equal(after.total_rows, 9);
  assert.ok(!after.rows.some((r) => r.id === 'doc-03'));

  // bulkDocs without ids: server assigns them
  const gen = await db.bulkDocs([{ a: 1 }, { a: 2 }]);
  assert.equal(gen.length, 2);
  assert.ok(gen[0].id && gen[1].id && gen[0].id !== gen[1].id);
  const info = await db.info();
  assert.equal(info.doc_count, 11);
  assert.equal(info.doc_del_count, 1);
  await db.destroy();
});

test('changes feed: normal, since, include_docs, doc_ids, live (longpoll)', async () => {
  const name = uniqueName('pouch-changes');
  const db = remoteDb(name);
  const a = await db.put({ _id: 'a', v: 1 });
  await db.put({ _id: 'b', v: 1 });
  await db.put({ _id: 'c', v: 1 });

  const ch = await db.changes();
  assert.deepEqual(feedIds(ch.results), ['a', 'b', 'c']);
  for (const r of ch.results) {
    assert.ok(r.seq !== undefined && r.seq !== null);
    assert.equal(r.changes.length, 1);
    assert.match(r.changes[0].rev, REV_RE);
  }
  assert.ok(ch.last_seq !== undefined);

  // since: opaque seq of the first change -> the two later ones
  const since = await db.changes({ since: ch.results[0].seq });
  assert.deepEqual(feedIds(since.results), ['a', 'b', 'c'].filter((id) => id !== ch.results[0].id));
  const sinceLast = await db.changes({ since: ch.last_seq });
  assert.deepEqual(sinceLast.results, []);

  // an updated doc moves to the end and appears once
  const a2 = await db.put({ _id: 'a', _rev: a.rev, v: 2 });
  const moved = await db.changes();
  assert.deepEqual(feedIds(moved.results), expectIds(['b', 'c', 'a']));
  assert.equal(moved.results.find((r) => r.id === 'a').changes[0].rev, a2.rev);

  // include_docs
  const withDocs = await db.changes({ include_docs: true });
  const docA = withDocs.results.find((r) => r.id === 'a').doc;
  assert.deepEqual(docA, { _id: 'a', _rev: a2.rev, v: 2 });

  // deletions show up with deleted: true
  const bDoc = await db.get('b');
  await db.remove(bDoc);
  const del = await db.changes({ since: moved.last_seq, include_docs: true });
  assert.equal(del.results.length, 1);
  assert.equal(del.results[0].id, 'b');
  assert.equal(del.results[0].deleted, true);
  assert.equal(del.results[0].doc._deleted, true);

  // limit
  const limited = await db.changes({ limit: 2 });
  assert.equal(limited.results.length, 2);

  // doc_ids filter (POST _changes?filter=_doc_ids)
  const filtered = await db.changes({ doc_ids: ['c', 'zzz'] });
  assert.deepEqual(filtered.results.map((r) => r.id), ['c']);

  // descending
  const descending = await db.changes({ descending: true });
  assert.deepEqual(feedIds(descending.results), expectIds(['b', 'a', 'c']));

  // live feed: a change made after subscribing arrives
  const live = db.changes({ live: true, since: 'now', include_docs: true, heartbeat: 1000 });
  const seen = [];
  const arrived = new Promise((resolve, reject) => {
    live.on('change', (c) => {
      seen.push(c);
      if (c.id === 'live-doc') resolve(c);
    });
    live.on('error', reject);
  });
  await sleep(500); // let the longpoll request reach the server
  await remoteDb(name).put({ _id: 'live-doc', hot: true });
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error('live change did not arrive within 10s')), 10000);
  });
  try {
    const change = await Promise.race([arrived, timeout]);
    assert.equal(change.doc.hot, true);
    assert.ok(!seen.some((c) => ['a', 'b', 'c'].includes(c.id)), 'since=now excludes old changes');
  } finally {
    clearTimeout(timer);
    live.cancel();
  }
  await db.destroy();
});

test('changes: raw longpoll request blocks until a write arrives', async () => {
  const name = uniqueName('pouch-longpoll');
  const db = remoteDb(name);
  await db.put({ _id: 'x' });
  const info = await db.info();
  const started = Date.now();
  const pending = raw('GET', `/${name}/_changes?feed=longpoll&since=${encodeURIComponent(info.update_seq)}&timeout=10000`);
  await sleep(400);
  await db.put({ _id: 'y' });
  const res = await pending;
  assert.equal(res.status, 200);
  assert.deepEqual(res.json.results.map((r) => r.id), ['y']);
  assert.ok(Date.now() - started >= 300, 'longpoll should have waited for the write');
  await db.destroy();
});

test('conflicts via new_edits:false: deterministic winner, conflicts:true, open_revs', async () => {
  const name = uniqueName('pouch-conflicts');
  const db = remoteDb(name);
  const root = hex32('1');
  const revA = '2-' + hex32('a');
  const revB = '2-' + hex32('b');

  const resA = await db.bulkDocs([
    { _id: 'conf', _rev: revA, _revisions: { start: 2, ids: [hex32('a'), root] }, side: 'a' },
  ], { new_edits: false });
  // CouchDB answers [] for new_edits:false bulk_docs without errors
  assert.ok(Array.isArray(resA));
  assert.ok(resA.every((r) => !r.error), JSON.stringify(resA));
  await db.bulkDocs([
    { _id: 'conf', _rev: revB, _revisions: { start: 2, ids: [hex32('b'), root] }, side: 'b' },
  ], { new_edits: false });

  // winner: equal depth -> higher rev id ("bbbb" > "aaaa")
  const win = await db.get('conf');
  assert.equal(win._rev, revB);
  assert.equal(win.side, 'b');

  const withConf = await db.get('conf', { conflicts: true });
  assert.equal(withConf._rev, revB);
  assert.deepEqual(withConf._conflicts, [revA]);

  const openAll = await db.get('conf', { open_revs: 'all' });
  assert.equal(openAll.length, 2);
  const leaves = openAll.map((r) => r.ok).sort((x, y) => (x._rev < y._rev ? -1 : 1));
  assert.deepEqual(leaves.map((d) => d._rev), [revA, revB]);
  assert.deepEqual(leaves.map((d) => d.side), ['a', 'b']);

  const openSome = await db.get('conf', { open_revs: [revA, '2-' + hex32('c')], revs: true });
  assert.equal(openSome.length, 2);
  const ok = openSome.find((r) => r.ok);
  const missing = openSome.find((r) => r.missing);
  assert.equal(ok.ok._rev, revA);
  assert.deepEqual(ok.ok._revisions, { start: 2, ids: [hex32('a'), root] });
  assert.equal(missing.missing, '2-' + hex32('c'));

  // the losing revision is readable by rev
  const loser = await db.get('conf', { rev: revA, revs: true });
  assert.equal(loser.side, 'a');
  assert.deepEqual(loser._revisions.ids, [hex32('a'), root]);

  // allDocs shows the winner; changes style=all_docs shows both leaves
  const all = await db.allDocs({ keys: ['conf'] });
  assert.equal(all.rows[0].value.rev, revB);
  const ch = await db.changes({ style: 'all_docs' });
  const confChange = ch.results.find((r) => r.id === 'conf');
  assert.deepEqual(confChange.changes.map((c) => c.rev).sort(), [revA, revB]);
  const chMain = await db.changes();
  assert.deepEqual(chMain.results.find((r) => r.id === 'conf').changes.map((c) => c.rev), [revB]);

  // a deeper branch wins regardless of rev id
  const revDeep = '3-' + hex32('0');
  await db.bulkDocs([
    { _id: 'conf', _rev: revDeep, _revisions: { start: 3, ids: [hex32('0'), hex32('a'), root] }, side: 'deep' },
  ], { new_edits: false });
  const deep = await db.get('conf', { conflicts: true });
  assert.equal(deep._rev, revDeep);
  assert.equal(deep.side, 'deep');
  assert.deepEqual(deep._conflicts, [revB]);

  // resolve the conflict by deleting the losing leaf
  const delRes = await db.remove('conf', revB);
  assert.ok(delRes.rev.startsWith('3-'));
  const resolved = await db.get('conf', { conflicts: true });
  assert.equal(resolved._rev, revDeep);
  assert.equal(resolved._conflicts, undefined);
  // PouchDB's http adapter does not forward deleted_conflicts: ask directly
  const deletedConflicts = await raw('GET', `/${name}/conf?deleted_conflicts=true`);
  assert.equal(deletedConflicts.status, 200);
  assert.equal(deletedConflicts.json._rev, revDeep);
  assert.deepEqual(deletedConflicts.json._deleted_conflicts, [delRes.rev]);

  // a deleted leaf never wins over a live one, whatever its depth/id
  const r2 = hex32('2');
  await db.bulkDocs([
    { _id: 'dz', _rev: '3-' + hex32('f'), _deleted: true, _revisions: { start: 3, ids: [hex32('f'), hex32('e'), r2] } },
    { _id: 'dz', _rev: '2-' + hex32('1'), _revisions: { start: 2, ids: [hex32('1'), r2] }, alive: true },
  ], { new_edits: false });
  const dz = await db.get('dz', { conflicts: true });
  assert.equal(dz._rev, '2-' + hex32('1'));
  assert.equal(dz.alive, true);
  assert.equal(dz._conflicts, undefined, 'deleted leaves are not _conflicts');

  // replaying the same revision with new_edits:false is a no-op
  await db.bulkDocs([
    { _id: 'conf', _rev: revA, _revisions: { start: 2, ids: [hex32('a'), root] }, side: 'a' },
  ], { new_edits: false });
  const again = await db.get('conf', { open_revs: 'all' });
  const againRevs = again.map((r) => r.ok._rev).sort();
  assert.deepEqual(againRevs, [delRes.rev, revDeep].sort());

  // revsDiff
  const diff = await db.revsDiff({ conf: [revA, revB, '9-' + hex32('9')], nodoc: ['1-' + hex32('5')] });
  assert.deepEqual(diff.conf.missing, ['9-' + hex32('9')]);
  assert.deepEqual(diff.nodoc.missing, ['1-' + hex32('5')]);
  await db.destroy();
});

test('local docs: _local/x put / get / update / remove', async () => {
  const db = remoteDb(uniqueName('pouch-local'));
  await db.put({ _id: 'normal' });

  const r1 = await db.put({ _id: '_local/x', v: 1 });
  assert.equal(r1.ok, true);
  assert.equal(r1.id, '_local/x');
  assert.equal(r1.rev, '0-1');

  const g1 = await db.get('_local/x');
  assert.deepEqual(g1, { _id: '_local/x', _rev: '0-1', v: 1 });

  g1.v = 2;
  const r2 = await db.put(g1);
  assert.equal(r2.rev, '0-2');
  const g2 = await db.get('_local/x');
  assert.equal(g2.v, 2);
  assert.equal(g2._rev, '0-2');

  // CouchDB keeps no MVCC for local docs (apache/pouchdb#7139): a stale _rev is not a
  // conflict, the new revision is the given one plus one.
  const r3stale = await db.put({ _id: '_local/x', _rev: '0-1', v: 3 });
  assert.equal(r3stale.rev, '0-2');
  assert.equal((await db.get('_local/x')).v, 3);

  // local docs are neither listed nor in the changes feed nor counted
  const all = await db.allDocs();
  assert.deepEqual(all.rows.map((r) => r.id), ['normal']);
  const ch = await db.changes();
  assert.deepEqual(ch.results.map((r) => r.id), ['normal']);
  const info = await db.info();
  assert.equal(info.doc_count, 1);

  const rm = await db.remove(g2);
  assert.equal(rm.ok, true);
  await rejects(db.get('_local/x'), (err) => {
    assert.equal(err.status, 404);
  });
  // recreate after removal starts over
  const r3 = await db.put({ _id: '_local/x', v: 'new' });
  assert.equal(r3.rev, '0-1');
  await db.destroy();
});

test('replication: memory -> server -> memory, idempotent re-runs, conflicts travel', async () => {
  const remoteName = uniqueName('pouch-repl');
  const remote = remoteDb(remoteName);
  const local = memoryDb('local-src');

  // source data: 25 docs, 3 updated twice, 1 deleted, 1 conflicted
  const docs = Array.from({ length: 25 }, (_, i) => ({
    _id: `r-${String(i).padStart(3, '0')}`,
    i,
    tags: ['t' + (i % 3)],
    nested: { deep: { value: i * 1.5, s: `str-${i}` } },
  }));
  const created = await local.bulkDocs(docs);
  for (const idx of [1, 2, 3]) {
    let rev = created[idx].rev;
    for (let k = 0; k < 2; k++) {
      const r = await local.put({ ...docs[idx], _rev: rev, updated: k + 1 });
      rev = r.rev;
    }
  }
  await local.remove(docs[4]._id, created[4].rev);
  await local.bulkDocs([
    { _id: 'lconf', _rev: '2-' + hex32('a'), _revisions: { start: 2, ids: [hex32('a'), hex32('1')] }, side: 'a' },
    { _id: 'lconf', _rev: '2-' + hex32('b'), _revisions: { start: 2, ids: [hex32('b'), hex32('1')] }, side: 'b' },
  ], { new_edits: false });

  const mark = requestLog.length;
  const push = await PouchDB.replicate(local, remote);
  assert.equal(push.ok, true);
  assert.equal(push.status, 'complete');
  assert.deepEqual(push.errors, []);
  assert.equal(push.doc_write_failures, 0);
  // one per leaf revision: 25 docs + 2 leaves of lconf
  assert.equal(push.docs_read, 27);
  assert.equal(push.docs_written, 27);
  // the push must not have hit any unexpected HTTP error
  const pushFailures = failedRequestsSince(mark, (r) =>
    r.status === 404 && (/\/_local\//.test(r.url) ||       // first checkpoint lookup
      (r.method === 'GET' && r.url === `${baseUrl}/${remoteName}/`))); // setup: db not there yet
  assert.deepEqual(pushFailures, []);
  assert.ok(requestLog.slice(mark).some((r) => /\/_revs_diff/.test(r.url) && r.status === 200));
  assert.ok(requestLog.slice(mark).some((r) => /\/_bulk_docs/.test(r.url) && r.status === 201));

  const rinfo = await remote.info();
  assert.equal(rinfo.doc_count, 25);   // 25 - 1 deleted + lconf
  assert.equal(rinfo.doc_del_count, 1);

  // same contents and revisions on both sides
  const lAll = await local.allDocs({ include_docs: true });
  const rAll = await remote.allDocs({ include_docs: true });
  assert.deepEqual(rAll.rows.map((r) => r.doc), lAll.rows.map((r) => r.doc));
  const lHist = await local.get('r-002', { revs: true });
  const rHist = await remote.get('r-002', { revs: true });
  assert.equal(rHist._rev, lHist._rev);
  assert.ok(rHist._rev.startsWith('3-'));
  assert.deepEqual(rHist._revisions, lHist._revisions);
  const rConf = await remote.get('lconf', { conflicts: true });
  assert.equal(rConf._rev, '2-' + hex32('b'));
  assert.deepEqual(rConf._conflicts, ['2-' + hex32('a')]);
  await rejects(remote.get('r-004'), (err) => assert.equal(err.reason, 'deleted'));

  // idempotent: second push finds nothing to do (checkpoint in _local docs)
  const push2 = await PouchDB.replicate(local, remote);
  assert.equal(push2.ok, true);
  assert.equal(push2.docs_written, 0);
  assert.equal(push2.docs_read, 0);
  assert.equal((await remote.info()).doc_count, 25);

  // server-side writes, then pull into the original and into a fresh db
  const r000 = await remote.get('r-000');
  await remote.put({ ...r000, fromServer: true });
  await remote.bulkDocs([{ _id: 's-1', srv: 1 }, { _id: 's-2', srv: 2 }]);

  const mark2 = requestLog.length;
  const pull = await PouchDB.replicate(remote, local);
  assert.equal(pull.ok, true);
  assert.deepEqual(pull.errors, []);
  assert.equal(pull.docs_written, 3);
  const pullFailures = failedRequestsSince(mark2, (r) =>
    r.status === 404 && /\/_local\//.test(r.url));
  assert.deepEqual(pullFailures, [], 'no failed requests (incl. _bulk_get) during pull');
  assert.ok(requestLog.slice(mark2).some((r) => /\/_bulk_get/.test(r.url) && r.status === 200),
    'PouchDB used _bulk_get successfully');
  assert.equal((await local.get('r-000')).fromServer, true);
  assert.equal((await local.get('s-2')).srv, 2);

  const fresh = memoryDb('local-fresh');
  const pullFresh = await PouchDB.replicate(remote, fresh);
  assert.equal(pullFresh.ok, true);
  assert.equal(pullFresh.docs_written, 29); // 28 docs (1 deleted) + lconf's 2nd leaf
  const fInfo = await fresh.info();
  assert.equal(fInfo.doc_count, 27);
  const fAll = await fresh.allDocs({ include_docs: true });
  const rAll2 = await remote.allDocs({ include_docs: true });
  assert.deepEqual(fAll.rows.map((r) => r.doc), rAll2.rows.map((r) => r.doc));
  // conflicts came back too
  const fConf = await fresh.get('lconf', { conflicts: true });
  assert.equal(fConf._rev, '2-' + hex32('b'));
  assert.deepEqual(fConf._conflicts, ['2-' + hex32('a')]);
  const fHist = await fresh.get('r-002', { revs: true });
  assert.deepEqual(fHist._revisions, lHist._revisions);

  // idempotent pull
  const pull2 = await PouchDB.replicate(remote, fresh);
  assert.equal(pull2.docs_written, 0);
  assert.equal(pull2.docs_read, 0);
  const pull3 = await PouchDB.replicate(remote, local);
  assert.equal(pull3.docs_written, 0);

  // checkpoints were written as _local docs on the server
  assert.ok(requestLog.some((r) => r.method === 'PUT' && r.url.includes(`/${remoteName}/_local/`) &&
    r.status === 201), 'replication checkpoint PUT /db/_local/... -> 201');

  // filtered replication by doc_ids (POST _changes?filter=_doc_ids)
  const picked = memoryDb('local-picked');
  const pr = await PouchDB.replicate(remote, picked, { doc_ids: ['r-001', 's-1', 'nope'] });
  assert.equal(pr.ok, true);
  assert.deepEqual((await picked.allDocs()).rows.map((r) => r.id), ['r-001', 's-1']);
  assert.deepEqual(await picked.get('r-001'), await remote.get('r-001'));

  await local.destroy();
  await fresh.destroy();
  await picked.destroy();
  await remote.destroy();
});

async function waitFor(what, check, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}`);
    await sleep(100);
  }
}

const exists = (db, id, pred = () => true) =>
  db.get(id).then(pred, () => false);

test('live sync: PouchDB.sync({live:true}) propagates changes both ways', async () => {
  const remote = remoteDb(uniqueName('pouch-sync'));
  await remote.info(); // create
  await remote.put({ _id: 'pre-existing', v: 0 });
  const local = memoryDb('local-sync');
  const sync = PouchDB.sync(local, remote, { live: true, retry: false, heartbeat: 2000 });
  const errors = [];
  sync.on('error', (e) => errors.push(e));
  sync.on('denied', (e) => errors.push(e));
  const completed = new Promise((r) => sync.on('complete', r));
  try {
    await waitFor('initial pull', () => exists(local, 'pre-existing'));
    await local.put({ _id: 'from-local', v: 1 });
    await waitFor('local -> server', () => exists(remote, 'from-local'));
    const r = await remote.put({ _id: 'from-remote', v: 2 });
    await waitFor('server -> local', () => exists(local, 'from-remote'));
    await remote.put({ _id: 'from-remote', _rev: r.rev, v: 3 });
    await waitFor('server update -> local', () => exists(local, 'from-remote', (d) => d.v === 3));
    const fl = await local.get('from-local');
    await local.remove(fl);
    await waitFor('local delete -> server', () =>
      remote.get('from-local').then(() => false, (e) => e.status === 404));
    assert.deepEqual(errors, []);
  } finally {
    sync.cancel();
  }
  await completed;
  assert.deepEqual((await local.allDocs()).rows.map((x) => x.id), ['from-remote', 'pre-existing']);
  assert.deepEqual((await remote.allDocs()).rows.map((x) => x.id), ['from-remote', 'pre-existing']);
  await local.destroy();
  await remote.destroy();
});

test('query(): map views, reduce, group_level, keys, include_docs, stale', async () => {
  const db = remoteDb(uniqueName('pouch-query'));
  const docs = [];
  for (let i = 0; i < 20; i++) {
    docs.push({ _id: `d${String(i).padStart(2, '0')}`, n: i, kind: i % 2 ? 'odd' : 'even', date: [2016, (i % 3) + 1, i] });
  }
  await db.bulkDocs(docs);
  await db.put({
    _id: '_design/q',
    views: {
      by_n: { map: 'function (doc) { if (typeof doc.n === "number") emit(doc.n, doc.kind); }' },
      by_kind: { map: 'function (doc) { emit(doc.kind, doc.n); }', reduce: '_sum' },
      by_date: { map: 'function (doc) { if (doc.date) emit(doc.date, 1); }', reduce: '_count' },
      js_max: {
        map: 'function (doc) { emit(doc.kind, doc.n); }',
        reduce: 'function (keys, values, rereduce) { return Math.max.apply(null, values); }',
      },
    },
  });

  const all = await db.query('q/by_n');
  assert.equal(all.total_rows, 20);
  assert.equal(all.offset, 0);
  assert.deepEqual(all.rows.map((r) => r.key), [...Array(20).keys()]);
  assert.deepEqual(all.rows[3], { id: 'd03', key: 3, value: 'odd' });

  const range = await db.query('q/by_n', { startkey: 5, endkey: 8, include_docs: true });
  assert.deepEqual(range.rows.map((r) => r.id), ['d05', 'd06', 'd07', 'd08']);
  assert.equal(range.offset, 5);
  assert.equal(range.rows[0].doc.kind, 'odd');
  assert.match(range.rows[0].doc._rev, REV_RE);

  const desc = await db.query('q/by_n', { descending: true, limit: 2 });
  assert.deepEqual(desc.rows.map((r) => r.key), [19, 18]);

  const keyed = await db.query('q/by_n', { keys: [7, 3, 99] }); // POST with keys
  assert.deepEqual(keyed.rows.map((r) => r.id), ['d07', 'd03']);

  const total = await db.query('q/by_kind');
  assert.deepEqual(total.rows, [{ key: null, value: 190 }]);
  const grouped = await db.query('q/by_kind', { group: true });
  assert.deepEqual(grouped.rows, [{ key: 'even', value: 90 }, { key: 'odd', value: 100 }]);
  const noReduce = await db.query('q/by_kind', { reduce: false, key: 'odd', limit: 2 });
  assert.deepEqual(noReduce.rows.map((r) => r.id), ['d01', 'd03']);

  const months = await db.query('q/by_date', { group_level: 2 });
  assert.deepEqual(months.rows, [
    { key: [2016, 1], value: 7 }, { key: [2016, 2], value: 7 }, { key: [2016, 3], value: 6 },
  ]);
  const jsMax = await db.query('q/js_max', { group: true });
  assert.deepEqual(jsMax.rows, [{ key: 'even', value: 18 }, { key: 'odd', value: 19 }]);

  // Incremental update after an edit and a delete.
  const d05 = await db.get('d05');
  await db.put({ ...d05, n: 500 });
  await db.remove(await db.get('d06'));
  const after = await db.query('q/by_kind', { group: true });
  assert.deepEqual(after.rows, [{ key: 'even', value: 84 }, { key: 'odd', value: 595 }]);

  // A stale query does not wait for new docs.
  await db.put({ _id: 'late', n: 1000, kind: 'odd' });
  const stale = await db.query('q/by_n', { stale: 'ok', key: 1000 });
  assert.equal(stale.rows.length, 0);
  const fresh = await db.query('q/by_n', { key: 1000 });
  assert.deepEqual(fresh.rows.map((r) => r.id), ['late']);

  await rejects(db.query('q/nope'), (err) => {
    assert.equal(err.status, 404);
  });
  await rejects(db.query('q/by_n', { group: true }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.name, 'query_parse_error');
  });
  await db.destroy();
});

test('security: members, design docs for admins only, validate_doc_update in replication', async () => {
  const name = `pouchuser${process.pid}`;
  const created = await raw('PUT', `/_users/org.couchdb.user:${name}`,
    { name, password: 'pw', roles: [], type: 'user' });
  assert.equal(created.status, 201, created.text);
  const dbName = uniqueName('pouch-sec');
  await raw('PUT', `/${dbName}`);
  const asUser = new PouchDB(`${baseUrl}/${dbName}`, {
    auth: { username: name, password: 'pw' }, skip_setup: true,
  });
  // admin-only by default (PouchDB's info() resolves with the error body, as with CouchDB)
  assert.equal((await asUser.info()).error, 'forbidden');
  await rejects(asUser.allDocs(), (err) => assert.equal(err.status, 403));
  const sec = await raw('PUT', `/${dbName}/_security`, { members: { names: [name] }, admins: {} });
  assert.equal(sec.status, 200);
  await asUser.put({ _id: 'n1', type: 'note' });
  await rejects(asUser.put({ _id: '_design/x', views: {} }), (err) => {
    assert.equal(err.status, 403);
    assert.equal(err.name, 'forbidden');
  });
  await raw('PUT', `/${dbName}/_design/rules`, {
    validate_doc_update: "function(n){ if (!n._deleted && !n.type) throw({forbidden: 'type required'}); }",
  });
  await rejects(asUser.put({ _id: 'bad' }), (err) => {
    assert.equal(err.status, 403);
    assert.equal(err.message, 'type required');
  });
  // replication as the user: the rejected doc is a write failure, the others arrive
  const local = memoryDb('pouch-sec-src');
  await local.bulkDocs([{ _id: 'ok1', type: 't' }, { _id: 'bad1' }, { _id: 'ok2', type: 't' }]);
  const result = await local.replicate.to(asUser);
  assert.equal(result.docs_written, 2);
  assert.equal(result.doc_write_failures, 1);
  const ids = (await asUser.allDocs()).rows.map((r) => r.id);
  assert.deepEqual(ids, ['_design/rules', 'n1', 'ok1', 'ok2']);
  // an anonymous client gets nothing
  const anon = new PouchDB(`${baseUrl}/${dbName}`, { skip_setup: true });
  await rejects(anon.allDocs(), (err) => assert.equal(err.status, 401));
  await raw('DELETE', `/${dbName}`);
});

test('attachments: inline put, getAttachment, replication both ways', async () => {
  const db = remoteDb(uniqueName('pouch-att'));
  const data = Buffer.from('hello attachments').toString('base64');
  await db.put({ _id: 'a', _attachments: { 'note.txt': { content_type: 'text/plain', data } } });
  const doc = await db.get('a');
  assert.equal(doc._attachments['note.txt'].stub, true);
  assert.equal(doc._attachments['note.txt'].length, 17);
  // in Node, PouchDB hands attachments back as Buffers
  const asBuffer = async (b) => (Buffer.isBuffer(b) ? b : Buffer.from(await b.arrayBuffer()));
  const blob = await db.getAttachment('a', 'note.txt');
  assert.equal((await asBuffer(blob)).toString(), 'hello attachments');
  const inline = await db.get('a', { attachments: true });
  assert.equal(inline._attachments['note.txt'].data, data);
  // a stub keeps it across an update
  await db.put({ ...doc, extra: 1 });
  assert.equal((await db.get('a'))._attachments['note.txt'].revpos, 1);
  // putAttachment / removeAttachment (standalone PUT and DELETE)
  const cur = await db.get('a');
  const put = await db.putAttachment('a', 'more.txt', cur._rev, Buffer.from('more'), 'text/plain');
  assert.equal((await asBuffer(await db.getAttachment('a', 'more.txt'))).toString(), 'more');
  const removed = await db.removeAttachment('a', 'more.txt', put.rev);
  assert.ok(removed.ok);
  await rejects(db.getAttachment('a', 'more.txt'), (err) => assert.equal(err.status, 404));

  // server -> memory -> server
  const local = memoryDb('pouch-att-local');
  await db.replicate.to(local);
  const copied = await local.get('a', { attachments: true });
  assert.equal(copied._attachments['note.txt'].data, data);
  await local.put({ _id: 'b', _attachments: { 'b.bin': { content_type: 'application/octet-stream', data: Buffer.from([0, 1, 2, 255]).toString('base64') } } });
  const back = await local.replicate.to(db);
  assert.equal(back.doc_write_failures, 0);
  const bin = await db.getAttachment('b', 'b.bin');
  assert.deepEqual([...(await asBuffer(bin))], [0, 1, 2, 255]);
  await db.destroy();
});

test('pouchdb-find: createIndex, find (selector, sort, fields, limit), explain, getIndexes, deleteIndex', async () => {
  const db = remoteDb(uniqueName('pouch-find'));
  const docs = [];
  for (let i = 0; i < 12; i++) {
    docs.push({ _id: `d${String(i).padStart(2, '0')}`, n: i, kind: i % 3 === 0 ? 'fizz' : 'plain', tags: [`t${i % 2}`] });
  }
  await db.bulkDocs(docs);

  // Without an index the server scans _all_docs and says so.
  const scan = await db.find({ selector: { kind: 'fizz' } });
  assert.deepEqual(scan.docs.map((d) => d._id), ['d00', 'd03', 'd06', 'd09']);
  assert.match(scan.warning, /No matching index found/);

  const created = await db.createIndex({ index: { fields: ['n'] }, ddoc: 'by-n', name: 'n-idx' });
  assert.equal(created.result, 'created');
  assert.equal((await db.createIndex({ index: { fields: ['n'] }, ddoc: 'by-n', name: 'n-idx' })).result, 'exists');

  const found = await db.find({
    selector: { n: { $gte: 4, $lt: 9 }, tags: { $elemMatch: { $eq: 't1' } } },
    sort: [{ n: 'desc' }],
    fields: ['_id', 'n'],
    limit: 2,
  });
  assert.deepEqual(found.docs, [{ _id: 'd07', n: 7 }, { _id: 'd05', n: 5 }]);
  assert.equal(found.warning, undefined);

  // Paging with the bookmark the server hands back.
  const page1 = await db.find({ selector: { n: { $gt: 0 } }, limit: 5 });
  const page2 = await db.find({ selector: { n: { $gt: 0 } }, limit: 5, bookmark: page1.bookmark });
  assert.deepEqual(page2.docs.map((d) => d.n), [6, 7, 8, 9, 10]);

  const explained = await db.explain({ selector: { n: { $gt: 3 } } });
  assert.equal(explained.index.name, 'n-idx');
  assert.deepEqual(explained.mrargs.start_key, [3]);

  const { indexes } = await db.getIndexes();
  assert.deepEqual(indexes.map((i) => i.name), ['_all_docs', 'n-idx']);
  await db.deleteIndex(indexes[1]);
  assert.equal((await db.getIndexes()).indexes.length, 1);

  await rejects(db.find({ selector: { n: 1 }, sort: ['n'] }), (err) => {
    assert.equal(err.status, 400);
    assert.equal(err.error, 'no_usable_index');
    assert.equal(err.reason, 'No index exists for this sort, try indexing by the sort fields.');
    return true;
  });
  await db.destroy();
});
