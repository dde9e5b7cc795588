"""What SQLAlchemy 2 (on psycopg 3), pandas and psycopg 2 see of one database.

Run as `python3 python_clients.py HOST PORT USER PASSWORD DBNAME SCHEMA`; prints one JSON
value per line, named by what it shows. The test runs it against cdcfusion and against
PostgreSQL holding the same rows and compares the outputs, so everything printed must be what
PostgreSQL prints too.
"""

import datetime
import decimal
import json
import sys

import pandas
import psycopg
import psycopg2
import psycopg2.extras
import sqlalchemy
from sqlalchemy import inspect
from psycopg.types.string import TextLoader

host, port, user, password, dbname, schema = sys.argv[1:7]


def plain(value):
    """A JSON-able form of a value, keeping its Python type visible."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return ["float", repr(value)]
    if isinstance(value, decimal.Decimal):
        return ["decimal", str(value)]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return [type(value).__name__, value.isoformat()]
    if isinstance(value, (bytes, memoryview)):
        return ["bytes", bytes(value).hex()]
    if isinstance(value, (dict, list)):
        return ["json", json.dumps(value, sort_keys=True)]
    if hasattr(value, "item"):  # numpy scalars, from pandas
        return plain(value.item())
    if isinstance(value, pandas.Timestamp):
        return ["timestamp", value.isoformat()]
    return [type(value).__name__, str(value)]


out = {}
url = sqlalchemy.engine.URL.create(
    "postgresql+psycopg", user, password, host, int(port), dbname
)
engine = sqlalchemy.create_engine(url)

# Reflection, as ORMs, migration tools and pandas use it.
insp = inspect(engine)
out["schema_listed"] = schema in insp.get_schema_names()
# Changelogs (`t$changelog`) have no counterpart in PostgreSQL.
out["tables"] = sorted(t for t in insp.get_table_names(schema=schema) if "$" not in t)
for table in out["tables"]:
    out["columns." + table] = [
        [c["name"], str(c["type"]), c["nullable"]]
        for c in insp.get_columns(table, schema=schema)
    ]
    pk = insp.get_pk_constraint(table, schema=schema)
    out["pk." + table] = [pk["name"], pk["constrained_columns"]]
    out["indexes." + table] = sorted(
        [i["name"], i["column_names"], i["unique"]]
        for i in insp.get_indexes(table, schema=schema)
    )
    out["fks." + table] = insp.get_foreign_keys(table, schema=schema)
    out["unique." + table] = insp.get_unique_constraints(table, schema=schema)
out["has_table"] = [
    insp.has_table("items", schema=schema),
    insp.has_table("nowhere", schema=schema),
]

# SQLAlchemy Core: a reflected table, a parameterised select, a transaction with a savepoint.
meta = sqlalchemy.MetaData()
items = sqlalchemy.Table("items", meta, autoload_with=engine, schema=schema)
with engine.connect() as conn:
    stmt = (
        sqlalchemy.select(items.c.id, items.c.name, items.c.price)
        .where(items.c.id.in_([1, 3, 5]))
        .order_by(items.c.id)
    )
    out["core_select"] = [[plain(v) for v in row] for row in conn.execute(stmt)]
    with conn.begin_nested():
        out["in_savepoint"] = conn.execute(
            sqlalchemy.text(f"SELECT count(*) FROM {schema}.items WHERE qty > :q"),
            {"q": 10},
        ).scalar_one()

# pandas over SQLAlchemy.
frame = pandas.read_sql(
    f"SELECT id, name, price, ratio, created, day FROM {schema}.items ORDER BY id", engine
)
out["read_sql.dtypes"] = [str(t) for t in frame.dtypes]
out["read_sql.rows"] = [[plain(v) for v in row] for row in frame.itertuples(index=False)]
whole = pandas.read_sql_table("items", engine, schema=schema).sort_values("id")
out["read_sql_table.columns"] = list(whole.columns)
out["read_sql_table.dtypes"] = [str(t) for t in whole.dtypes]
out["read_sql_table.rows"] = len(whole)
lines = pandas.read_sql_table("lines", engine, schema=schema, index_col=["order_id", "line"])
out["read_sql_table.lines"] = [list(lines.index.names), len(lines)]
engine.dispose()

# psycopg 2: its own type casters, cursor.description, a named (server-side) cursor.
conn2 = psycopg2.connect(
    host=host, port=port, user=user, password=password, dbname=dbname
)
cur = conn2.cursor()
cur.execute(
    f"SELECT id, name, price, qty, ratio, created, day, doc, note, data FROM {schema}.items "
    "WHERE id BETWEEN %s AND %s ORDER BY id",
    (2, 4),
)
out["psycopg2.description"] = [
    [d.name, d.type_code, d.internal_size if d.type_code != 1700 else None, d.precision, d.scale]
    for d in cur.description
]
out["psycopg2.rows"] = [[plain(v) for v in row] for row in cur.fetchall()]
# Where result columns come from (the table's oid and column number), renamed or not: a
# primary-key lookup (answered from the key index) and a join; computed values have none.
for label, sql in [
    ("lookup", f"SELECT id AS key, name FROM {schema}.items WHERE id = 3"),
    (
        "join",
        f"SELECT i.name AS label, l.line, l.line + 1 AS next FROM {schema}.items i "
        f"JOIN {schema}.lines l ON l.item_id = i.id ORDER BY 1, 2",
    ),
]:
    cur.execute(sql)
    out[f"psycopg2.origins.{label}"] = [
        [d.name, bool(d.table_oid), d.table_column] for d in cur.description
    ] + [list(r) for r in cur.fetchall()]
# Averages of integers and decimals are numeric (oid 1700) at PostgreSQL's scale.
cur.execute(f"SELECT avg(id), avg(price) AS mean_price FROM {schema}.items")
out["psycopg2.avg"] = [[d.name, d.type_code] for d in cur.description] + [
    str(v) for v in cur.fetchone()
]
cur.execute(f"SELECT name FROM {schema}.items WHERE name = ANY(%s) ORDER BY 1", (["item 2", "item 7"],))
out["psycopg2.any"] = cur.fetchall()
with conn2.cursor(name="walk") as named:
    named.itersize = 3
    named.execute(f"SELECT id FROM {schema}.items ORDER BY id")
    out["psycopg2.named"] = [r[0] for r in named]
conn2.rollback()
dict_cur = conn2.cursor(cursor_factory=psycopg2.extras.RealDictCursor)
dict_cur.execute(f"SELECT id, doc FROM {schema}.items WHERE id = %s", (1,))
out["psycopg2.dict"] = {k: plain(v) for k, v in dict_cur.fetchone().items()}
conn2.close()

# The text of every temporal and float type, as the server writes it (loaded as text, not
# parsed).
with psycopg.connect(
    host=host, port=port, user=user, password=password, dbname=dbname
) as conn3:
    for name in ["timestamp", "timestamptz", "date", "time", "interval", "float4", "float8"]:
        conn3.adapters.register_loader(name, TextLoader)
    out["psycopg.text.kinds"] = [
        list(row) for row in conn3.execute(f"SELECT * FROM {schema}.kinds ORDER BY id")
    ]

for key in sorted(out):
    print(key, json.dumps(out[key], sort_keys=True, default=str))
