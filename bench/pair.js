#!/usr/bin/env node
'use strict';
// Times ONNX Runtime and Onyx run by run: in each round ORT runs the model once,
// then each Onyx configuration once, so both meet the machine in the same state.
// bench/run.sh alternates whole processes (a second or more each); this machine's
// slow phases come and go within seconds, so only run-by-run pairs tell how each
// runtime fares in them (docs/performance.md, "Instructions per FMA").
//
//   node bench/pair.js MODEL [--rounds N] [--threads T] [--warmup W]
//                      [--config FILE]... [--onyx PATH] [--gap-ms G] [--out FILE]
//
// MODEL is a .onnx file or a folder with model.onnx; a test_data_set_0 folder next
// to it feeds both runtimes the same inputs (else each generates its own). Each
// --config starts one `onyx bench MODEL --serve` process (none: the default
// providers), so a provider built from another commit can run in the same rounds.
// --onyx sets the onyx binary of the --config options after it (and of the run
// without any), so two builds of the host can run in the same rounds too.
// --gap-ms sleeps between runs. At 2 threads ORT's pool keeps spinning after a run
// and slows the Onyx run that follows; bench/run.sh is the figure for 2 threads.
//
// Prints, per runtime, the median and the 10th/90th percentiles of its runs, the
// ratio ORT / Onyx of the medians, the median of the per-round ratios, and the
// ratio in the quarter of rounds where ORT ran fastest and in the quarter where it
// ran slowest. --out writes every round (seconds since start, then each runtime's ms).
const fs = require('fs');
const path = require('path');
const readline = require('readline');
const { spawn } = require('child_process');

const repo = path.resolve(__dirname, '..');
const peerDir = process.env.PEER || process.env.ONYX_PEER_SCRIPTS || path.join(repo, '..', 'shared', 'peer');

function usage(msg) {
  if (msg) console.error(`pair.js: ${msg}`);
  console.error('usage: node bench/pair.js MODEL [--rounds N] [--threads T] [--warmup W] ' +
    '[--config FILE]... [--onyx PATH] [--gap-ms G] [--out FILE]');
  process.exit(2);
}

function parseArgs(argv) {
  const a = { rounds: 100, threads: 1, warmup: 5, configs: [], gap: 0,
    onyx: path.join(repo, 'build', 'bin', 'onyx') };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = () => (i + 1 < argv.length ? argv[++i] : usage(`${k} needs a value`));
    const int = (min) => { const n = Number(v()); if (!Number.isInteger(n) || n < min) usage(`${k} needs an integer >= ${min}`); return n; };
    if (k === '--rounds') a.rounds = int(1);
    else if (k === '--threads') a.threads = int(1);
    else if (k === '--warmup') a.warmup = int(0);
    else if (k === '--gap-ms') a.gap = int(0);
    else if (k === '--config') a.configs.push({ file: v(), onyx: a.onyx });
    else if (k === '--onyx') a.onyx = v();
    else if (k === '--out') a.out = v();
    else if (k === '-h' || k === '--help') usage();
    else if (k.startsWith('--')) usage(`unknown option ${k}`);
    else if (a.model) usage(`one MODEL only (got ${a.model} and ${k})`);
    else a.model = k;
  }
  if (!a.model) usage('MODEL is missing');
  return a;
}

// One `onyx bench --serve` process; run() resolves to one run's ms.
function onyxServer(a, file, inputs, config, onyx) {
  const args = ['bench', file, '--threads', String(a.threads), '--warmup', String(a.warmup), '--serve'];
  if (inputs) args.push('--inputs', inputs);
  if (config) args.push('--config', config);
  const ch = spawn(onyx, args, { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = [];
  let waiter = null;
  let failed = null;
  readline.createInterface({ input: ch.stdout }).on('line', (l) => {
    if (waiter) { const w = waiter; waiter = null; w(l); } else lines.push(l);
  });
  ch.on('exit', (code) => {
    failed = new Error(`onyx bench --serve${config ? ` --config ${config}` : ''} exited with status ${code}`);
    if (waiter) { const w = waiter; waiter = null; w(null); }
  });
  const next = () => new Promise((res) => (lines.length ? res(lines.shift()) : failed ? res(null) : (waiter = res)));
  const line = async () => { const l = await next(); if (l === null) throw failed; return l; };
  return {
    ready: async () => { const l = await line(); if (l !== 'ready') throw new Error(`onyx bench --serve said '${l}'`); },
    run: async () => { ch.stdin.write('\n'); return parseFloat(await line()); },
    close: () => ch.stdin.end(),
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const q = (s, p) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
const median = (xs) => { const s = [...xs].sort((x, y) => x - y); const n = s.length; return n % 2 ? s[(n - 1) / 2] : (s[n / 2 - 1] + s[n / 2]) / 2; };

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const isDir = fs.statSync(a.model).isDirectory();
  const file = isDir ? path.join(a.model, 'model.onnx') : a.model;
  const data = isDir ? path.join(a.model, 'test_data_set_0') : null;
  const inputs = data && fs.existsSync(data) ? data : null;
  if (a.threads > 1) console.error('pair.js: at more than 1 thread ORT\'s spinning pool slows the Onyx run after it; see the header');

  const lib = require(path.join(peerDir, 'lib.js'));
  const ort = lib.ort();
  const runs = a.configs.length ? a.configs : [{ file: null, onyx: a.onyx }];
  const servers = runs.map((c) => onyxServer(a, file, inputs, c.file, c.onyx));
  for (const s of servers) await s.ready();
  const session = await ort.InferenceSession.create(file, lib.sessionOptions(a.threads));
  const feeds = {};
  if (inputs) {
    const tensors = lib.listPb(inputs, 'input').map(lib.readTensorFile);
    const byName = tensors.every((t) => session.inputNames.includes(t.name));
    tensors.forEach((t, i) => { feeds[byName ? t.name : session.inputNames[i]] = new ort.Tensor(t.type, t.data, t.dims); });
  } else {
    session.inputMetadata.forEach((m, i) => { feeds[m.name] = lib.generateTensor(m, i, {}, 'random'); });
  }

  const rows = [];
  const t0 = process.hrtime.bigint();
  for (let r = -a.warmup; r < a.rounds; r++) {
    if (a.gap) await sleep(a.gap);
    const start = process.hrtime.bigint();
    await session.run(feeds);
    const row = [Number(start - t0) / 1e9, Number(process.hrtime.bigint() - start) / 1e6];
    for (const s of servers) {
      if (a.gap) await sleep(a.gap);
      row.push(await s.run());
    }
    if (r >= 0) rows.push(row);
  }
  servers.forEach((s) => s.close());
  await session.release();

  if (a.out) fs.writeFileSync(a.out, rows.map((x) => x.map((v) => v.toFixed(3)).join(' ')).join('\n') + '\n');
  const binaries = new Set(runs.map((c) => c.onyx)).size;
  const names = ['ORT', ...runs.map((c) => ['Onyx', c.file && path.basename(c.file), binaries > 1 && c.onyx]
    .filter(Boolean).join(' '))];
  const byOrt = [...rows].sort((x, y) => x[1] - y[1]);
  const quarter = Math.max(1, Math.floor(rows.length / 4));
  const fast = byOrt.slice(0, quarter), slow = byOrt.slice(-quarter);
  console.log(`${path.basename(isDir ? a.model : file)}, ${a.threads} thread(s), ${rows.length} rounds${inputs ? '' : ' (generated inputs)'}`);
  console.log('| runtime | median ms | p10 | p90 | ratio ORT/x (medians) | per-round ratio | fastest ORT quarter | slowest ORT quarter |');
  console.log('|---|---|---|---|---|---|---|---|');
  names.forEach((n, c) => {
    const col = rows.map((x) => x[c + 1]).sort((x, y) => x - y);
    const m = median(col);
    const ratio = (sel) => (median(sel.map((x) => x[1])) / median(sel.map((x) => x[c + 1]))).toFixed(3);
    const cells = c === 0 ? ['', '', '', ''] : [ratio(rows), median(rows.map((x) => x[1] / x[c + 1])).toFixed(3), ratio(fast), ratio(slow)];
    console.log(`| ${n} | ${m.toFixed(3)} | ${q(col, 0.1).toFixed(3)} | ${q(col, 0.9).toFixed(3)} | ${cells.join(' | ')} |`);
  });
}

main().catch((e) => { console.error(`pair.js: ${e.message}`); process.exit(1); });
