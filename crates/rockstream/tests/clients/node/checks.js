// Client-compatibility checks: what Node.js applications do with `pg` (node-postgres) and
// `pg-copy-streams`.
//
// Usage: node checks.js POSTGRESQL_URL [CHECK ...]
//
// Each check uses the driver with its default settings, the way an application would, and
// asserts what PostgreSQL answers. The same program runs against PostgreSQL and against
// RockStream (`it::clients` runs both); a check that fails on PostgreSQL is a wrong check.
// Tables a check needs are created first (a check's setup), named after the check, so that
// checks do not see each other's rows.
//
// Prints one JSON object per check on its own line: {"check": name, "ok": bool, "error": text}.
// Exits 0 once every check has run, whatever their outcome (the caller judges them).

'use strict';

const assert = require('node:assert/strict');
const { pipeline } = require('node:stream/promises');
const { Readable, Writable } = require('node:stream');
const pg = require('pg');
const copyStreams = require('pg-copy-streams');

const CHECKS = [];

function check(name, body) {
  CHECKS.push({ name, body });
}

/// Runs `body` with a connected client, and closes it.
async function withClient(url, body) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await body(client);
  } finally {
    await client.end();
  }
}

/// A check's setup: statements over their own connection.
async function setup(url, ...statements) {
  await withClient(url, async (client) => {
    for (const statement of statements) {
      await client.query(statement);
    }
  });
}

check('node_pg_version', async (url) => {
  await withClient(url, async (client) => {
    const { rows } = await client.query('SELECT version() AS v');
    assert.match(rows[0].v, /^PostgreSQL 15/);
    const shown = await client.query('SHOW server_version');
    assert.match(shown.rows[0].server_version, /^15/);
  });
});

check('node_pg_parameters_and_types', async (url) => {
  await setup(
    url,
    `CREATE TABLE node_types (id BIGINT PRIMARY KEY, n INT, amount NUMERIC(12,2), label TEXT,
       day DATE, at TIMESTAMP, flag BOOLEAN, ratio DOUBLE PRECISION)`,
  );
  await withClient(url, async (client) => {
    const inserted = await client.query(
      'INSERT INTO node_types VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
      [1, 42, '1234.50', 'naïve café', '2024-02-29', '2024-02-29 13:45:06.789', true, 0.25],
    );
    assert.equal(inserted.rowCount, 1);
    await client.query('INSERT INTO node_types (id) VALUES ($1)', [2]);
    const { rows, fields } = await client.query('SELECT * FROM node_types ORDER BY id');
    assert.deepEqual(
      fields.map((field) => [field.name, field.dataTypeID]),
      [['id', 20], ['n', 23], ['amount', 1700], ['label', 25], ['day', 1082], ['at', 1114],
        ['flag', 16], ['ratio', 701]],
    );
    const [first, second] = rows;
    // pg's defaults: int8 and numeric as strings, dates as local-time Date objects.
    assert.equal(first.id, '1');
    assert.equal(first.n, 42);
    assert.equal(first.amount, '1234.50');
    assert.equal(first.label, 'naïve café');
    assert.equal(first.day.getFullYear(), 2024);
    assert.equal(first.day.getMonth(), 1);
    assert.equal(first.day.getDate(), 29);
    assert.equal(first.at.getTime(), new Date(2024, 1, 29, 13, 45, 6, 789).getTime());
    assert.equal(first.flag, true);
    assert.equal(first.ratio, 0.25);
    assert.deepEqual(Object.values(second), ['2', null, null, null, null, null, null, null]);
  });
});

check('node_pg_named_prepared_statement', async (url) => {
  await setup(
    url,
    'CREATE TABLE node_prepared (id INT PRIMARY KEY, name TEXT)',
    "INSERT INTO node_prepared VALUES (1, 'one'), (2, 'two'), (3, 'three')",
  );
  await withClient(url, async (client) => {
    const fetch = (id) => client.query({
      name: 'fetch-name',
      text: 'SELECT name FROM node_prepared WHERE id = $1',
      values: [id],
    });
    assert.equal((await fetch(1)).rows[0].name, 'one');
    assert.equal((await fetch(3)).rows[0].name, 'three');
    assert.equal((await fetch(9)).rowCount, 0);
    const array = await client.query({
      text: 'SELECT id, name FROM node_prepared WHERE id < $1 ORDER BY id',
      values: [3],
      rowMode: 'array',
    });
    assert.deepEqual(array.rows, [[1, 'one'], [2, 'two']]);
  });
});

check('node_pg_transactions', async (url) => {
  await setup(url, 'CREATE TABLE node_tx (id INT PRIMARY KEY, v INT)');
  await withClient(url, async (client) => {
    await client.query('BEGIN');
    await client.query('INSERT INTO node_tx VALUES (1, 10), (2, 20)');
    await client.query('ROLLBACK');
    assert.equal((await client.query('SELECT count(*)::int AS n FROM node_tx')).rows[0].n, 0);
    await client.query('BEGIN');
    await client.query('INSERT INTO node_tx VALUES (1, 10)');
    await client.query('SAVEPOINT s');
    await client.query('INSERT INTO node_tx VALUES (2, 20)');
    await client.query('ROLLBACK TO SAVEPOINT s');
    await client.query('COMMIT');
    const { rows } = await client.query('SELECT id FROM node_tx ORDER BY id');
    assert.deepEqual(rows, [{ id: 1 }]);
  });
});

check('node_pg_errors_keep_the_connection', async (url) => {
  await setup(url, 'CREATE TABLE node_errors (id INT PRIMARY KEY)');
  await withClient(url, async (client) => {
    await client.query('INSERT INTO node_errors VALUES (1)');
    await assert.rejects(client.query('INSERT INTO node_errors VALUES (1)'), { code: '23505' });
    await assert.rejects(client.query('SELECT * FROM node_no_such_table'), { code: '42P01' });
    await assert.rejects(client.query('SELECT 1 / 0'), { code: '22012' });
    assert.equal((await client.query('SELECT 1 AS one')).rows[0].one, 1);
  });
});

check('node_pg_pool', async (url) => {
  await setup(url, 'CREATE TABLE node_pool (id INT PRIMARY KEY, worker INT)');
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  try {
    await Promise.all(
      Array.from({ length: 40 }, (_, id) => pool.query(
        'INSERT INTO node_pool VALUES ($1, $2)',
        [id, id % 4],
      )),
    );
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('DELETE FROM node_pool WHERE worker = 0');
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM node_pool');
    assert.equal(rows[0].n, 30);
  } finally {
    await pool.end();
  }
});

check('node_pg_ddl_in_a_transaction', async (url) => {
  await withClient(url, async (client) => {
    await client.query('BEGIN');
    await client.query('CREATE TABLE node_migrated (id INT PRIMARY KEY, note TEXT)');
    await client.query("INSERT INTO node_migrated VALUES (1, 'first')");
    await client.query('COMMIT');
    await client.query('BEGIN');
    await client.query('CREATE TABLE node_abandoned (id INT)');
    await client.query('ROLLBACK');
    const { rows } = await client.query(
      "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'node_%' "
      + "AND table_name IN ('node_migrated', 'node_abandoned')",
    );
    assert.deepEqual(rows, [{ table_name: 'node_migrated' }]);
  });
});

check('node_pg_materialized_view_follows_commits', async (url) => {
  await setup(
    url,
    'CREATE TABLE node_orders (id INT PRIMARY KEY, region TEXT, amount INT)',
    "INSERT INTO node_orders VALUES (1, 'eu', 10), (2, 'us', 20)",
    `CREATE MATERIALIZED VIEW node_by_region AS
       SELECT region, sum(amount)::int AS total FROM node_orders GROUP BY region`,
  );
  await withClient(url, async (client) => {
    await client.query("INSERT INTO node_orders VALUES (3, 'eu', 5)");
    // PostgreSQL needs the refresh; RockStream's view is already current.
    await client.query('REFRESH MATERIALIZED VIEW node_by_region');
    const { rows } = await client.query('SELECT * FROM node_by_region ORDER BY region');
    assert.deepEqual(rows, [{ region: 'eu', total: 15 }, { region: 'us', total: 20 }]);
  });
});

check('node_pg_copy_streams', async (url) => {
  await setup(url, 'CREATE TABLE node_copy (id INT PRIMARY KEY, name TEXT, amount NUMERIC(8,2))');
  await withClient(url, async (client) => {
    const lines = Array.from({ length: 1000 }, (_, id) => `${id},"name, ${id}",${id}.50\n`);
    await pipeline(
      Readable.from(lines),
      client.query(copyStreams.from('COPY node_copy FROM STDIN (FORMAT csv)')),
    );
    const { rows } = await client.query(
      'SELECT count(*)::int AS n, sum(amount)::text AS total FROM node_copy',
    );
    assert.deepEqual(rows, [{ n: 1000, total: '500000.00' }]);
    const chunks = [];
    await pipeline(
      client.query(copyStreams.to(
        'COPY (SELECT * FROM node_copy WHERE id < 3 ORDER BY id) TO STDOUT (FORMAT csv, HEADER)',
      )),
      new Writable({
        write(chunk, _encoding, done) {
          chunks.push(chunk);
          done();
        },
      }),
    );
    assert.equal(
      Buffer.concat(chunks).toString(),
      'id,name,amount\n0,"name, 0",0.50\n1,"name, 1",1.50\n2,"name, 2",2.50\n',
    );
  });
});

check('node_pg_returning', async (url) => {
  await setup(url, 'CREATE TABLE node_returning (id INT PRIMARY KEY, name TEXT, n INT)');
  await withClient(url, async (client) => {
    const inserted = await client.query(
      'INSERT INTO node_returning VALUES ($1, $2, $3), ($4, $5, $6) RETURNING id, upper(name) AS shout',
      [1, 'one', 10, 2, 'two', 20],
    );
    assert.equal(inserted.command, 'INSERT');
    assert.equal(inserted.rowCount, 2);
    assert.deepEqual(inserted.rows, [{ id: 1, shout: 'ONE' }, { id: 2, shout: 'TWO' }]);
    const updated = await client.query(
      'UPDATE node_returning SET n = n + $1 WHERE id = $2 RETURNING *',
      [5, 2],
    );
    assert.equal(updated.command, 'UPDATE');
    assert.deepEqual(updated.rows, [{ id: 2, name: 'two', n: 25 }]);
    const deleted = await client.query('DELETE FROM node_returning WHERE id = $1 RETURNING name', [1]);
    assert.equal(deleted.command, 'DELETE');
    assert.deepEqual(deleted.rows, [{ name: 'one' }]);
  });
});

check('node_pg_serial_upsert', async (url) => {
  // A key-value store as Node applications write one: a generated id, a
  // unique key, and upserts with parameters.
  await setup(
    url,
    'CREATE TABLE node_kv (id SERIAL, k TEXT PRIMARY KEY, v INT NOT NULL, ' +
      "updated TIMESTAMPTZ DEFAULT now(), origin TEXT DEFAULT 'app')",
  );
  await withClient(url, async (client) => {
    const upsert =
      'INSERT INTO node_kv (k, v) VALUES ($1, $2) ' +
      'ON CONFLICT (k) DO UPDATE SET v = node_kv.v + excluded.v RETURNING id, k, v, origin';
    const first = await client.query(upsert, ['a', 1]);
    assert.deepEqual(first.rows, [{ id: 1, k: 'a', v: 1, origin: 'app' }]);
    const second = await client.query(upsert, ['a', 5]);
    assert.deepEqual(second.rows, [{ id: 1, k: 'a', v: 6, origin: 'app' }]);
    const other = await client.query(upsert, ['b', 2]);
    // The conflicting insert drew a value too, as in PostgreSQL.
    assert.deepEqual(other.rows, [{ id: 3, k: 'b', v: 2, origin: 'app' }]);
    const skipped = await client.query(
      'INSERT INTO node_kv (k, v) VALUES ($1, $2) ON CONFLICT DO NOTHING',
      ['a', 9],
    );
    assert.equal(skipped.rowCount, 0);
    const { rows } = await client.query('SELECT k, v, updated IS NOT NULL AS stamped FROM node_kv ORDER BY k');
    assert.deepEqual(rows, [
      { k: 'a', v: 6, stamped: true },
      { k: 'b', v: 2, stamped: true },
    ]);
  });
});

check('node_pg_array_parameter', async (url) => {
  await setup(
    url,
    'CREATE TABLE node_any (id INT PRIMARY KEY, name TEXT)',
    "INSERT INTO node_any VALUES (1, 'one'), (2, 'two'), (3, 'three')",
  );
  await withClient(url, async (client) => {
    const { rows } = await client.query(
      'SELECT name FROM node_any WHERE id = ANY($1) ORDER BY id',
      [[1, 3]],
    );
    assert.deepEqual(rows, [{ name: 'one' }, { name: 'three' }]);
  });
});

async function main() {
  const [url, ...chosen] = process.argv.slice(2);
  if (!url) {
    process.stderr.write('usage: node checks.js POSTGRESQL_URL [CHECK ...]\n');
    process.exit(2);
  }
  for (const { name, body } of CHECKS) {
    if (chosen.length > 0 && !chosen.includes(name)) {
      continue;
    }
    let outcome;
    try {
      await body(url);
      outcome = { check: name, ok: true };
    } catch (error) {
      outcome = { check: name, ok: false, error: String(error && error.stack || error).slice(0, 2000) };
    }
    process.stdout.write(`${JSON.stringify(outcome)}\n`);
  }
}

main();
