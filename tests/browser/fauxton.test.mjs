// Fauxton, CouchDB's dashboard, driven through Settee in headless Chromium: the flows a
// user clicks through (log in and out, databases, documents, attachments, conflicts,
// design documents and views, Mango, changes, permissions, replication, active tasks,
// config and CORS), each checked through the HTTP API as well as on the page. Any answer
// of 5xx (or 501) to the page's own requests fails the test.
//
// Run:  node --test tests/browser/fauxton.test.mjs   (after ./scripts/fauxton)
// Env:  SETTEE_BIN   the settee binary (default: the workspace's target/release/settee)
//       CHROMIUM     the browser (default: /usr/bin/chromium)
//       ARTIFACTS    where screenshots of failed steps go (default: tests/browser/artifacts)

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.join(here, '..', '..');
const SETTEE_BIN = process.env.SETTEE_BIN || path.join(repo, 'target', 'release', 'settee');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.ARTIFACTS || path.join(here, 'artifacts');
const DOCROOT = path.join(repo, 'ui', 'fauxton');
const AUTH = 'Basic ' + Buffer.from('admin:pw').toString('base64');

let base, server, dataDir, browser, page;
let serverLog = '';
const failures = [];
// The page's console errors: shown with a failed step, not failures themselves (Fauxton
// logs some on CouchDB too).
const consoleErrors = [];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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

async function api(method, p, body) {
  const res = await fetch(base + p, {
    method,
    headers: { Authorization: AUTH, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text };
}

/** Polls `check` (an async predicate) until it holds. */
async function eventually(what, check, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await check();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(150);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`);
}

/** Runs one user flow; a failure leaves a screenshot named after it. */
async function step(name, fn) {
  try {
    await fn();
  } catch (e) {
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const file = path.join(ARTIFACTS, name.replace(/[^a-z0-9]+/gi, '_') + '.png');
    await page.screenshot({ path: file, fullPage: true }).catch(() => {});
    e.message += `\n(screenshot: ${file})\n${failures.join('\n')}\nconsole errors:\n${consoleErrors.slice(-5).join('\n')}`;
    throw e;
  }
}

/** Opens a Fauxton route in a freshly loaded page, as a user following a link would. */
///
/// Fauxton 1.2.6's document editor can unmount itself on load when the document arrives
/// before its editor is mounted (`onSaveComplete` reads a null editor): the page goes
/// blank, as it can against CouchDB on a fast link. A user reloads; so does this, up to
/// three times.
async function go(hash) {
  for (let attempt = 0; attempt < 3; attempt++) {
    await page.goto('about:blank');
    await page.goto(`${base}/_utils/${hash}`);
    await page.waitForLoadState('networkidle');
    if (await page.locator('.faux-navbar').count()) return;
  }
}

/** Waits until the page's location (hash routes included) matches `re`. */
async function waitHash(re) {
  await page.waitForFunction((src) => new RegExp(src).test(location.href), re.source);
}

/** Opens a document from its database's list, as a user does. (Loading a document's page
 * directly races Fauxton 1.2.6's editor, which then blanks the page when the document
 * arrives before the database's info.) */
async function openDoc(db, id) {
  await go(`#/database/${db}/_all_docs`);
  await page.locator('td', { hasText: new RegExp(`^${id}$`) }).first().click();
  await waitHash(new RegExp(`database/${db}/${id}$`));
  await page.waitForSelector('#doc-editor');
}

/** Sets the text of the page's (first, or `selector`'s) Ace editor. */
async function setEditor(value, selector = '.ace_editor') {
  await page.waitForSelector(selector);
  await page.evaluate(({ selector, value }) => {
    const el = document.querySelector(selector);
    window.ace.edit(el).setValue(value, 1);
  }, { selector, value });
}

before(async () => {
  assert.ok(fs.existsSync(path.join(DOCROOT, 'index.html')), 'Fauxton is not installed: run ./scripts/fauxton');
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'settee-fauxton-'));
  const ini = path.join(dataDir, 'fauxton.ini');
  fs.writeFileSync(ini, `[chttpd]\ndocroot = ${DOCROOT}\n`);
  server = spawn(SETTEE_BIN, ['serve', '--data-dir', path.join(dataDir, 'data'), '--bind', `127.0.0.1:${port}`,
    '--admin', 'admin:pw', '--config', ini], { stdio: ['ignore', 'ignore', 'pipe'] });
  server.stderr.on('data', (d) => { serverLog += d; });
  await eventually('the server', async () => (await fetch(base + '/_up')).status === 200);
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.setDefaultTimeout(10000);
  page.on('response', (r) => {
    if (r.status() >= 500) failures.push(`${r.status()} ${r.request().method()} ${r.url()}`);
  });
  page.on('pageerror', (e) => failures.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text().slice(0, 500)); });
});

after(async () => {
  await browser?.close();
  if (server && server.exitCode === null) {
    const exited = new Promise((r) => server.once('exit', r));
    server.kill('SIGTERM');
    await exited;
  }
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

test('Fauxton flows against Settee', { timeout: 300000 }, async () => {
  await step('utils redirect and files', async () => {
    const r = await fetch(base + '/_utils', { redirect: 'manual' });
    assert.equal(r.status, 301);
    assert.equal(r.headers.get('location'), `${base}/_utils/`);
    const idx = await fetch(base + '/_utils/', { headers: { 'Accept-Encoding': 'gzip' } });
    assert.equal(idx.status, 200);
    assert.match(idx.headers.get('content-type'), /text\/html/);
    assert.equal(idx.headers.get('cache-control'), 'private, must-revalidate');
  });

  await step('log in', async () => {
    await go('');
    await page.fill('#username', 'admin');
    await page.fill('#password', 'pw');
    await page.click('#submit');
    await page.waitForSelector('text=Log Out');
  });

  await step('create a database', async () => {
    await go('#/_all_dbs');
    await page.click('.add-new-database-btn');
    await page.fill('#js-new-database-name', 'fauxdb');
    await page.press('#js-new-database-name', 'Enter');
    await eventually('fauxdb', async () => (await api('GET', '/fauxdb')).status === 200);
    await waitHash(/database\/fauxdb\/_all_docs/);
  });

  await step('databases list, pagination and search', async () => {
    for (let i = 0; i < 25; i++) await api('PUT', `/bulk-${String(i).padStart(2, '0')}`);
    await go('#/_all_dbs');
    await page.waitForSelector('text=bulk-00');
    assert.equal(await page.locator('text=bulk-24').count(), 0, 'the first page holds 20 databases');
    await page.click('.pagination li:last-child a');
    await page.waitForSelector('text=fauxdb');
    await go('#/_all_dbs');
    const jump = page.locator('.Select-input input').first();
    await jump.fill('fauxdb');
    await page.waitForSelector('.Select-option:has-text("fauxdb")');
    await jump.press('Enter');
    await waitHash(/database\/fauxdb\//);
  });

  await step('create, edit and delete a document', async () => {
    await go('#/database/fauxdb/_new');
    await setEditor(JSON.stringify({ _id: 'doc1', title: 'hello' }));
    await page.click('button:has-text("Create Document")');
    await eventually('doc1', async () => (await api('GET', '/fauxdb/doc1')).json?.title === 'hello');
    // Fauxton returns to the list once its save completes.
    await waitHash(/database\/fauxdb\/_all_docs/);
    await page.waitForSelector('td:has-text("doc1")');
    await openDoc('fauxdb', 'doc1');
    const doc = (await api('GET', '/fauxdb/doc1')).json;
    await setEditor(JSON.stringify({ ...doc, title: 'edited' }));
    await page.click('button:has-text("Save Changes")');
    await eventually('the edit', async () => (await api('GET', '/fauxdb/doc1')).json?.title === 'edited');
    await page.waitForSelector('text=saved successfully');
    await api('PUT', '/fauxdb/doomed', { x: 1 });
    await openDoc('fauxdb', 'doomed');
    page.once('dialog', (d) => d.accept());
    await page.click('button[title="Delete"]');
    const confirm = page.locator('.modal button:has-text("Delete Document")');
    if (await confirm.count()) await confirm.click();
    await eventually('the deletion', async () => (await api('GET', '/fauxdb/doomed')).status === 404);
  });

  await step('conflicts', async () => {
    await api('PUT', '/fauxdb/c1', { side: 'a' });
    await api('POST', '/fauxdb/_bulk_docs', { new_edits: false, docs: [{ _id: 'c1', _rev: '1-ffffffffffffffffffffffffffffffff', side: 'b' }] });
    // Fauxton 1.2.6's editor page for a conflicted document often blanks itself (its
    // `onSaveComplete` reads an editor not yet mounted when the conflict count arrives);
    // the revision browser, which that page's "Conflicts" button opens, is checked here.
    await go('#/database/fauxdb/c1/conflicts');
    await page.waitForSelector('text=1-ffffffffffffffffffffffffffffffff');
    const losing = (await api('GET', '/fauxdb/c1?conflicts=true')).json._conflicts[0];
    await page.waitForSelector(`text=${losing}`);
  });

  await step('upload an attachment', async () => {
    await openDoc('fauxdb', 'doc1');
    await page.click('button:has-text("Upload Attachment")');
    const file = path.join(dataDir, 'note.txt');
    fs.writeFileSync(file, 'attached text');
    await page.setInputFiles('.modal input[type=file]', file);
    await page.click('.modal button:has-text("Upload")');
    await eventually('the attachment', async () => {
      const r = await fetch(base + '/fauxdb/doc1/note.txt', { headers: { Authorization: AUTH } });
      return r.status === 200 && (await r.text()) === 'attached text';
    });
  });

  await step('create a view and query it', async () => {
    for (let i = 0; i < 5; i++) await api('PUT', `/fauxdb/n${i}`, { n: i, kind: i % 2 ? 'odd' : 'even' });
    await go('#/database/fauxdb/new_view');
    await page.fill('#new-ddoc', 'app');
    await page.fill('#index-name', 'by_kind');
    await setEditor('function (doc) { if (doc.kind) emit(doc.kind, doc.n); }', '#map-function');
    await page.selectOption('#reduce-function-selector', '_sum');
    await page.click('button:has-text("Create Document and then Build Index")');
    await eventually('the design document', async () => (await api('GET', '/fauxdb/_design/app')).json?.views?.by_kind?.reduce === '_sum');
    await waitHash(/_design\/app\/_view\/by_kind/);
    await page.waitForSelector('text=even');
    // Query options: reduce, grouped.
    await page.click('button:has-text("Options")');
    await page.click('label[for="qoReduce"]');
    await page.selectOption('#qoGroupLevel', 'exact').catch(() => {});
    await page.click('button:has-text("Run Query")');
    await page.waitForSelector('text=odd');
    const rows = (await api('GET', '/fauxdb/_design/app/_view/by_kind?group=true')).json.rows;
    assert.deepEqual(rows, [{ key: 'even', value: 6 }, { key: 'odd', value: 4 }]);
  });

  await step('Mango query and index', async () => {
    await go('#/database/fauxdb/_find');
    await setEditor(JSON.stringify({ selector: { kind: 'odd' } }));
    await page.click('button:has-text("Run Query")');
    await page.waitForSelector('text=n1');
    await page.waitForSelector('text=n3');
    await go('#/database/fauxdb/_index');
    await setEditor(JSON.stringify({ index: { fields: ['n'] }, name: 'n-index', type: 'json' }));
    await page.click('button:has-text("Create Index")');
    await eventually('the index', async () => (await api('GET', '/fauxdb/_index')).json?.indexes?.some((i) => i.name === 'n-index'));
  });

  await step('changes', async () => {
    await go('#/database/fauxdb/_changes');
    await page.waitForSelector('text=doc1');
  });

  await step('permissions', async () => {
    await go('#/database/fauxdb/permissions');
    // Admins' inputs come first, then the members'.
    await page.locator('input[placeholder="Username"]').nth(1).fill('alice');
    await page.locator('button:has-text("Add User")').nth(1).click();
    await eventually('the security object', async () => (await api('GET', '/fauxdb/_security')).json?.members?.names?.includes('alice'));
  });

  await step('replication', async () => {
    await go('#/replication/_create');
    await page.selectOption('select#replication-source', 'REPLICATION_SOURCE_LOCAL');
    const source = page.locator('.Select-input input').first();
    await source.fill('fauxdb');
    await page.waitForSelector('.Select-option:has-text("fauxdb")');
    await source.press('Enter');
    await page.selectOption('#select-replication-source-auth', 'BASIC_AUTH');
    await page.fill('#replication-source-auth-username', 'admin');
    await page.fill('#replication-source-auth-password', 'pw');
    await page.selectOption('select#replication-target >> nth=0', 'REPLICATION_TARGET_NEW_LOCAL_DATABASE');
    await page.fill('.replication__new-input', 'fauxcopy');
    await page.selectOption('#select-replication-target-auth', 'BASIC_AUTH');
    await page.fill('#replication-target-auth-username', 'admin');
    await page.fill('#replication-target-auth-password', 'pw');
    await page.click('#replicate');
    await eventually('the replicated database', async () => (await api('GET', '/fauxcopy/doc1')).status === 200, 30000);
    const jobs = (await api('GET', '/_replicator/_all_docs')).json.rows.filter((r) => !r.id.startsWith('_design/'));
    assert.equal(jobs.length, 1);
    await go('#/replication');
    await page.waitForSelector('td:has-text("fauxcopy")');
    await page.waitForSelector('text=Completed');
  });

  await step('active tasks', async () => {
    // A continuous replication stays listed as a task.
    const r = await api('POST', '/_replicator', {
      _id: 'live', continuous: true,
      source: { url: `${base}/fauxdb`, headers: { Authorization: AUTH } },
      target: { url: `${base}/fauxlive`, headers: { Authorization: AUTH } },
      create_target: true,
    });
    assert.equal(r.status, 201, r.text);
    await eventually('the task', async () => (await api('GET', '/_active_tasks')).json.some((t) => t.type === 'replication'));
    await go('#/activetasks');
    await page.waitForSelector('td:has-text("fauxlive")');
  });

  await step('config and CORS', async () => {
    await go('#/_config');
    await page.waitForSelector('text=couchdb');
    await go('#/_config/nonode@nohost/cors');
    await page.click('button:has-text("Enable CORS")');
    await eventually('CORS', async () => (await api('GET', '/_node/nonode@nohost/_config/chttpd/enable_cors')).json === 'true'
      || (await api('GET', '/_node/nonode@nohost/_config/httpd/enable_cors')).json === 'true');
  });

  await step('delete a database', async () => {
    await go('#/_all_dbs');
    await page.click('tr:has-text("bulk-00") .icon-trash');
    await page.fill('.modal input', 'bulk-00');
    await page.click('.modal button:has-text("Delete Database")');
    await eventually('the deletion', async () => (await api('GET', '/bulk-00')).status === 404);
  });

  await step('log out', async () => {
    await page.click('text=Log Out');
    await page.waitForSelector('#username');
    const session = await page.evaluate(async () => (await fetch('/_session')).json());
    assert.equal(session.userCtx.name, null);
  });

  assert.deepEqual(failures, [], `server errors seen by the page:\n${failures.join('\n')}\n${serverLog.slice(-2000)}`);
});
