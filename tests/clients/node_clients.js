// What node-postgres sees of one database: parameters of every type, arrays included.
//
// Run as `node node_clients.js CONNINFO_URL SCHEMA` with `pg` on NODE_PATH; prints one JSON
// line per key. The test compares it with the same script's output against PostgreSQL.

const { Client } = require('pg');

function plain(v) {
  if (v === null || typeof v === 'boolean' || typeof v === 'number' || typeof v === 'string') return v;
  if (v instanceof Date) return ['Date', v.toISOString()];
  if (Buffer.isBuffer(v)) return ['Buffer', v.toString('hex')];
  if (Array.isArray(v)) return ['Array', v.map(plain)];
  return [typeof v, JSON.stringify(v)];
}

async function main() {
  const [url, schema] = process.argv.slice(2);
  const client = new Client({ connectionString: url });
  await client.connect();
  const out = {};
  const q = async (label, text, params) => {
    const res = await client.query(text, params);
    out[label] = {
      fields: res.fields.map((f) => [f.name, f.dataTypeID]),
      rows: res.rows.map((r) => Object.values(r).map(plain)),
    };
  };
  const t = `${schema}.items`;
  await q('any_int', `SELECT id FROM ${t} WHERE id = ANY($1) ORDER BY id`, [[1, 3, 5, 99]]);
  await q('any_text', `SELECT id FROM ${t} WHERE name = ANY($1) ORDER BY id`, [['item 2', 'item 4']]);
  await q('all_int', `SELECT count(*) FROM ${t} WHERE id <> ALL($1)`, [[1, 2]]);
  await q('int_array_cast', `SELECT id FROM ${t} WHERE id = ANY($1::int[]) ORDER BY id`, [[6, 7]]);
  await q('text', `SELECT id, name FROM ${t} WHERE name = $1`, ['item 3']);
  await q('numeric', `SELECT id FROM ${t} WHERE price > $1 ORDER BY id`, ['12.50']);
  await q('float', `SELECT id FROM ${t} WHERE ratio < $1 ORDER BY id`, [0.6]);
  await q('bigint', `SELECT id FROM ${t} WHERE qty = $1`, ['9']);
  await q('bool', `SELECT count(*) FROM ${t} WHERE (note IS NULL) = $1`, [true]);
  await q('null', `SELECT count(*) FROM ${t} WHERE note IS NOT DISTINCT FROM $1`, [null]);
  await q('date', `SELECT id FROM ${t} WHERE day = $1::date`, ['2024-03-04']);
  await q('timestamp', `SELECT id FROM ${t} WHERE created < $1::timestamp ORDER BY id`, ['2024-01-02 06:00:00']);
  await q('bytea', `SELECT id FROM ${t} WHERE data = $1`, [Buffer.from('03ff', 'hex')]);
  await q('object_param', `SELECT $1::text AS j`, [{ k: 'v', n: [1, 2] }]);
  await q('values', `SELECT id, name, price, qty, ratio, created, day, doc, note, data FROM ${t} WHERE id IN (1, 3) ORDER BY id`, []);
  await q('array_result', `SELECT array_agg(id ORDER BY id) AS ids FROM ${t} WHERE id < $1`, [4]);
  await q('named', `SELECT name FROM ${t} WHERE id = $1`, [2]);
  // A named prepared statement, executed twice.
  for (const id of [5, 6]) {
    const res = await client.query({ name: 'by_id', text: `SELECT name FROM ${t} WHERE id = $1`, values: [id] });
    out['prepared_' + id] = res.rows.map((r) => r.name);
  }
  try {
    await client.query(`SELECT * FROM ${schema}.nowhere`);
  } catch (e) {
    out.error = e.code;
  }
  await client.end();
  for (const k of Object.keys(out).sort()) console.log(k + " " + JSON.stringify(out[k]));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
