"""Client-compatibility checks: what Python applications do with their PostgreSQL drivers.

Usage: checks.py POSTGRESQL_URL [CHECK ...]

Each check uses one client (psycopg2, psycopg 3, asyncpg, SQLAlchemy 2, pandas) with the client's
default settings, the way an application would, and asserts what PostgreSQL answers. The same
program runs against PostgreSQL and against RockStream (`it::clients` runs both); a check that
fails on PostgreSQL is a wrong check. Tables a check needs are created first over an autocommit
connection, named after the check, so that checks do not see each other's rows; only a check
about DDL itself creates tables the client's own way.

Prints one JSON object per check on its own line: {"check": name, "ok": bool, "error": text}.
Exits 0 once every check has run, whatever their outcome (the caller judges them).
"""

import asyncio
import datetime
import decimal
import io
import json
import sys
import traceback
import urllib.parse

CHECKS = []


def check(function):
    CHECKS.append(function)
    return function


def ddl(url, *statements):
    """Runs statements over an autocommit psycopg2 connection (a check's setup, not its test)."""
    import psycopg2

    connection = psycopg2.connect(url)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            for statement in statements:
                cursor.execute(statement)
    finally:
        connection.close()


def expect(actual, expected, what):
    if actual != expected:
        raise AssertionError(f"{what}: expected {expected!r}, got {actual!r}")


ROW_TYPES = """CREATE TABLE {name} (
    id BIGINT PRIMARY KEY, n INT, amount NUMERIC(12,2), label TEXT, day DATE,
    at TIMESTAMP, flag BOOLEAN, ratio DOUBLE PRECISION)"""

SAMPLE = (
    1,
    42,
    decimal.Decimal("1234.50"),
    "naïve café",
    datetime.date(2024, 2, 29),
    datetime.datetime(2024, 2, 29, 13, 45, 6, 789000),
    True,
    0.25,
)

# --- psycopg2 ----------------------------------------------------------------------------------


@check
def psycopg2_version(url):
    import psycopg2

    with psycopg2.connect(url) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        (version,) = cursor.fetchone()
        if not version.startswith("PostgreSQL 15"):
            raise AssertionError(f"version() is {version!r}")
        if not 150000 <= connection.server_version < 160000:
            raise AssertionError(f"server_version is {connection.server_version}")


@check
def psycopg2_parameters_and_types(url):
    import psycopg2

    ddl(url, ROW_TYPES.format(name="p2_types"))
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO p2_types VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", SAMPLE
            )
            cursor.execute("INSERT INTO p2_types (id) VALUES (%(id)s)", {"id": 2})
        connection.commit()
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM p2_types WHERE id = %s", (1,))
            expect(cursor.fetchone(), SAMPLE, "row 1")
            cursor.execute("SELECT * FROM p2_types WHERE id = %s", (2,))
            expect(cursor.fetchone(), (2,) + (None,) * 7, "row 2")
            expect(
                [column.name for column in cursor.description],
                ["id", "n", "amount", "label", "day", "at", "flag", "ratio"],
                "column names",
            )
    finally:
        connection.close()


@check
def psycopg2_executemany_and_rollback(url):
    import psycopg2

    ddl(url, "CREATE TABLE p2_many (id INT PRIMARY KEY, name TEXT)")
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO p2_many VALUES (%s, %s)", [(i, f"n{i}") for i in range(100)]
            )
        connection.commit()
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM p2_many WHERE id < 50")
            expect(cursor.rowcount, 50, "rows deleted")
        connection.rollback()
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*), sum(id) FROM p2_many")
            expect(cursor.fetchone(), (100, 4950), "count and sum after rollback")
    finally:
        connection.close()


@check
def psycopg2_materialized_view_follows_commits(url):
    import psycopg2

    ddl(
        url,
        "CREATE TABLE p2_orders (id INT PRIMARY KEY, region TEXT, amount NUMERIC(10,2))",
        "CREATE MATERIALIZED VIEW p2_revenue AS "
        "SELECT region, count(*) AS orders, sum(amount) AS revenue FROM p2_orders GROUP BY region",
    )
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO p2_orders VALUES (1, 'eu', 10.50), (2, 'eu', 4.50), (3, 'us', 1)"
            )
            connection.commit()
            # PostgreSQL's materialized views are refreshed by hand; RockStream's need not be.
            # REFRESH is accepted by both.
            cursor.execute("REFRESH MATERIALIZED VIEW p2_revenue")
            connection.commit()
            cursor.execute("SELECT region, orders, revenue FROM p2_revenue ORDER BY region")
            expect(
                cursor.fetchall(),
                [("eu", 2, decimal.Decimal("15.00")), ("us", 1, decimal.Decimal("1.00"))],
                "view rows",
            )
    finally:
        connection.close()


@check
def psycopg2_ddl_in_a_transaction(url):
    import psycopg2

    connection = psycopg2.connect(url)  # a transaction opens before the first statement
    try:
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE p2_ddl (id INT PRIMARY KEY)")
            cursor.execute("INSERT INTO p2_ddl VALUES (1)")
        connection.commit()
        with connection.cursor() as cursor:
            cursor.execute("CREATE TABLE p2_ddl_gone (id INT)")
        connection.rollback()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'p2_ddl%' ORDER BY 1"
            )
            expect(cursor.fetchall(), [("p2_ddl",)], "tables left")
    finally:
        connection.close()


@check
def psycopg2_create_and_drop_database(url):
    """A test runner's database of its own (as Django's creates test_<name>):
    created and dropped over autocommit, its tables its own."""
    import os

    import psycopg2

    name = f"p2_database_{os.getpid()}"
    ddl(url, f"DROP DATABASE IF EXISTS {name}", f"CREATE DATABASE {name}")
    try:
        connection = psycopg2.connect(url, dbname=name)
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_database()")
                expect(cursor.fetchone(), (name,), "current database")
                cursor.execute("CREATE TABLE p2_own (id INT PRIMARY KEY)")
                cursor.execute("INSERT INTO p2_own VALUES (1)")
            connection.commit()
        finally:
            connection.close()
        admin = psycopg2.connect(url)
        try:
            with admin.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'p2_own'")
                expect(cursor.fetchone(), (0,), "the other database's table, seen from this one")
                cursor.execute("SELECT count(*) FROM pg_database WHERE datname = %s", (name,))
                expect(cursor.fetchone(), (1,), "listed in pg_database")
        finally:
            admin.close()
    finally:
        ddl(url, f"DROP DATABASE {name}")
    try:
        psycopg2.connect(url, dbname=name).close()
    except psycopg2.OperationalError as error:
        expect("does not exist" in str(error), True, f"connecting after the drop: {error}")
    else:
        raise AssertionError("connected to a dropped database")


@check
def psycopg2_copy_csv_in(url):
    import psycopg2

    ddl(url, "CREATE TABLE p2_csv (id INT PRIMARY KEY, name TEXT, note TEXT)")
    connection = psycopg2.connect(url)
    try:
        data = 'id,name,note\n1,"Smith, Jo","said ""hi"""\n2,plain,\n'
        with connection.cursor() as cursor:
            cursor.copy_expert(
                "COPY p2_csv FROM STDIN WITH (FORMAT csv, HEADER true)", io.StringIO(data)
            )
            cursor.copy_expert(
                "COPY p2_csv FROM STDIN WITH CSV HEADER DELIMITER ';'",
                io.StringIO("id;name;note\n3;semi;x\n"),
            )
        connection.commit()
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM p2_csv ORDER BY id")
            expect(
                cursor.fetchall(),
                [(1, "Smith, Jo", 'said "hi"'), (2, "plain", None), (3, "semi", "x")],
                "rows",
            )
    finally:
        connection.close()


@check
def psycopg2_copy_out(url):
    import psycopg2

    ddl(
        url,
        "CREATE TABLE p2_out (id INT PRIMARY KEY, name TEXT)",
        "INSERT INTO p2_out VALUES (1, 'a'), (2, NULL)",
    )
    connection = psycopg2.connect(url)
    try:
        with connection.cursor() as cursor:
            text = io.StringIO()
            cursor.copy_expert("COPY (SELECT * FROM p2_out ORDER BY id) TO STDOUT", text)
            expect(text.getvalue(), "1\ta\n2\t\\N\n", "text output")
            csv = io.StringIO()
            cursor.copy_expert("COPY p2_out TO STDOUT WITH (FORMAT csv, HEADER)", csv)
            expect(sorted(csv.getvalue().splitlines()), ["1,a", "2,", "id,name"], "csv output")
    finally:
        connection.close()


@check
def psycopg2_server_side_cursor(url):
    import psycopg2

    ddl(url, "CREATE TABLE p2_cursor (id INT PRIMARY KEY)")
    ddl(url, "INSERT INTO p2_cursor SELECT * FROM generate_series(1, 1000)")
    connection = psycopg2.connect(url)
    try:
        with connection.cursor("big") as cursor:  # DECLARE big CURSOR ... / FETCH
            cursor.itersize = 100
            cursor.execute("SELECT id FROM p2_cursor ORDER BY id")
            expect(sum(row[0] for row in cursor), 500500, "sum over the cursor")
    finally:
        connection.close()


# --- psycopg 3 ---------------------------------------------------------------------------------


@check
def psycopg3_parameters_binary_and_prepared(url):
    import psycopg

    ddl(url, ROW_TYPES.format(name="p3_types"))
    with psycopg.connect(url) as connection:
        connection.execute("INSERT INTO p3_types VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", SAMPLE)
        connection.commit()
        expect(
            connection.execute("SELECT * FROM p3_types WHERE id = %s", (1,)).fetchone(),
            SAMPLE,
            "row (text results)",
        )
        with connection.cursor(binary=True) as cursor:
            expect(
                cursor.execute("SELECT * FROM p3_types WHERE id = %s", (1,)).fetchone(),
                SAMPLE,
                "row (binary results)",
            )
        # The sixth execution of one statement is prepared on the server; a rollback then sends
        # DEALLOCATE ALL.
        for _ in range(8):
            expect(
                connection.execute("SELECT n FROM p3_types WHERE id = %s", (1,)).fetchone(),
                (42,),
                "prepared lookup",
            )
        connection.rollback()
        expect(connection.execute("SELECT count(*) FROM p3_types").fetchone(), (1,), "count")


@check
def psycopg3_copy(url):
    import psycopg

    ddl(url, "CREATE TABLE p3_copy (id INT PRIMARY KEY, name TEXT, at DATE)")
    with psycopg.connect(url) as connection:
        with connection.cursor() as cursor:
            with cursor.copy("COPY p3_copy (id, name, at) FROM STDIN") as copy:
                for i in range(1, 501):
                    copy.write_row((i, f"row {i}", datetime.date(2024, 1, 1)))
        connection.commit()
        expect(
            connection.execute("SELECT count(*), max(name) FROM p3_copy").fetchone(),
            (500, "row 99"),
            "copied rows",
        )


@check
def psycopg3_binary_copy(url):
    import psycopg

    ddl(url, "CREATE TABLE p3_binary (id INT PRIMARY KEY, name TEXT, amount NUMERIC(10,2), at DATE)")
    with psycopg.connect(url) as connection:
        with connection.cursor() as cursor:
            with cursor.copy("COPY p3_binary (id, name, amount, at) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int4", "text", "numeric", "date"])
                copy.write_row((1, "one", decimal.Decimal("1.50"), datetime.date(2024, 2, 29)))
                copy.write_row((2, None, None, None))
        connection.commit()
        expect(
            connection.execute("SELECT * FROM p3_binary ORDER BY id").fetchall(),
            [(1, "one", decimal.Decimal("1.50"), datetime.date(2024, 2, 29)), (2, None, None, None)],
            "rows",
        )
        with connection.cursor() as cursor:
            with cursor.copy("COPY (SELECT id, name FROM p3_binary ORDER BY id) TO STDOUT") as copy:
                rows = list(copy.rows())
        expect(rows, [("1", "one"), ("2", None)], "rows copied out")


@check
def psycopg3_nested_transactions(url):
    import psycopg

    ddl(url, "CREATE TABLE p3_nested (id INT PRIMARY KEY)")
    with psycopg.connect(url) as connection:
        with connection.transaction():
            connection.execute("INSERT INTO p3_nested VALUES (1)")
            try:
                with connection.transaction():  # SAVEPOINT
                    connection.execute("INSERT INTO p3_nested VALUES (2)")
                    raise RuntimeError("undo the inner block")
            except RuntimeError:
                pass
            # A failed statement inside the inner block: rolled back to its
            # savepoint, after which the outer transaction goes on.
            try:
                with connection.transaction():
                    connection.execute("INSERT INTO p3_nested VALUES (1)")
            except psycopg.errors.UniqueViolation:
                pass
            connection.execute("INSERT INTO p3_nested VALUES (3)")
        expect(
            connection.execute("SELECT id FROM p3_nested ORDER BY id").fetchall(),
            [(1,), (3,)],
            "rows",
        )


@check
def psycopg3_server_side_cursor_and_settings(url):
    import psycopg

    ddl(
        url,
        "CREATE TABLE p3_cursor (id INT PRIMARY KEY)",
        "INSERT INTO p3_cursor SELECT * FROM generate_series(1, 300)",
    )
    with psycopg.connect(url) as connection:
        setting = connection.execute(
            "SELECT current_setting(%s)", ("standard_conforming_strings",)
        ).fetchone()
        expect(setting, ("on",), "current_setting over the extended protocol")
        with connection.cursor(name="p3_big") as cursor:  # DECLARE, then FETCH in batches
            cursor.itersize = 100
            cursor.execute("SELECT id FROM p3_cursor ORDER BY id")
            expect(sum(row[0] for row in cursor), 45150, "sum over the cursor")


# --- asyncpg -----------------------------------------------------------------------------------


def run(coroutine):
    return asyncio.run(coroutine)


@check
def asyncpg_parameters_and_types(url):
    import asyncpg

    ddl(url, ROW_TYPES.format(name="apg_types"))

    async def body():
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(
                "INSERT INTO apg_types VALUES ($1, $2, $3, $4, $5, $6, $7, $8)", *SAMPLE
            )
            row = await connection.fetchrow("SELECT * FROM apg_types WHERE id = $1", 1)
            expect(tuple(row), SAMPLE, "row")
            statement = await connection.prepare("SELECT label FROM apg_types WHERE id = $1")
            expect(await statement.fetchval(1), SAMPLE[3], "prepared fetch")
            async with connection.transaction():
                await connection.execute("DELETE FROM apg_types")
            try:
                async with connection.transaction():
                    await connection.execute("INSERT INTO apg_types (id) VALUES (9)")
                    raise RuntimeError("roll back")
            except RuntimeError:
                pass
            expect(await connection.fetchval("SELECT count(*) FROM apg_types"), 0, "count")
        finally:
            await connection.close()

    run(body())


@check
def asyncpg_show_and_session_functions(url):
    """SHOW through the extended protocol (asyncpg describes every statement
    first), and what tools ask about the server and the session."""
    import asyncpg

    async def body():
        connection = await asyncpg.connect(url)
        try:
            expect(await connection.fetchval("SHOW statement_timeout"), "0", "SHOW")
            expect(
                await connection.fetchval("SELECT pg_backend_pid()"),
                connection.get_server_pid(),
                "pg_backend_pid",
            )
            expect(await connection.fetchval("SELECT pg_is_in_recovery()"), False, "recovery")
            async with connection.transaction():
                first = await connection.fetchval("SELECT txid_current()")
                expect(await connection.fetchval("SELECT txid_current()"), first, "txid")
        finally:
            await connection.close()

    run(body())


@check
def asyncpg_defaults_and_upsert(url):
    """Prepared INSERTs that leave columns to their defaults, and an upsert
    whose SET takes a parameter: asyncpg binds by the described types."""
    import asyncpg

    ddl(
        url,
        "CREATE TABLE apg_jobs (id SERIAL PRIMARY KEY, name TEXT, "
        "timeout INTERVAL DEFAULT '00:05:00', runs INT DEFAULT 0)",
    )

    async def body():
        connection = await asyncpg.connect(url)
        try:
            first = await connection.fetchval(
                "INSERT INTO apg_jobs (name) VALUES ($1) RETURNING id", "a"
            )
            second = await connection.fetchval(
                "INSERT INTO apg_jobs VALUES (DEFAULT, $1) RETURNING id", "b"
            )
            expect([first, second], [1, 2], "ids")
            runs = await connection.fetchval(
                "INSERT INTO apg_jobs (id, name) VALUES ($1, $2) ON CONFLICT (id) "
                "DO UPDATE SET runs = apg_jobs.runs + $3::int RETURNING runs",
                1,
                "a",
                5,
            )
            expect(runs, 5, "runs after the upsert")
            # Without casts: the SET's parameters take their columns' types.
            row = await connection.fetchrow(
                "INSERT INTO apg_jobs AS j (id, name) VALUES ($1, $2) ON CONFLICT (id) "
                "DO UPDATE SET runs = j.runs + $3, name = $4 WHERE j.runs < $5 "
                "RETURNING runs, name",
                1,
                "a",
                2,
                "renamed",
                10,
            )
            expect((row["runs"], row["name"]), (7, "renamed"), "upsert without casts")
            row = await connection.fetchrow("SELECT timeout, runs FROM apg_jobs WHERE id = 2")
            expect((str(row["timeout"]), row["runs"]), ("0:05:00", 0), "defaults")
        finally:
            await connection.close()

    run(body())


@check
def asyncpg_pool_release(url):
    import asyncpg

    async def body():
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
        try:
            for i in range(5):  # each release runs the pool's reset query
                async with pool.acquire() as connection:
                    expect(await connection.fetchval("SELECT $1::int + 1", i), i + 1, "answer")
        finally:
            await pool.close()

    run(body())


@check
def asyncpg_copy_records(url):
    import asyncpg

    ddl(url, "CREATE TABLE apg_copy (id INT PRIMARY KEY, name TEXT)")

    async def body():
        connection = await asyncpg.connect(url)
        try:
            # Binary COPY: asyncpg's bulk load.
            await connection.copy_records_to_table(
                "apg_copy", records=[(i, f"r{i}") for i in range(200)]
            )
            expect(await connection.fetchval("SELECT count(*) FROM apg_copy"), 200, "count")
        finally:
            await connection.close()

    run(body())


@check
def asyncpg_returning(url):
    import asyncpg

    ddl(url, "CREATE TABLE apg_returning (id INT PRIMARY KEY, name TEXT)")

    async def body():
        connection = await asyncpg.connect(url)
        try:
            row = await connection.fetchrow(
                "INSERT INTO apg_returning VALUES ($1, $2) RETURNING id, name", 7, "seven"
            )
            expect(tuple(row), (7, "seven"), "inserted row")
            name = await connection.fetchval(
                "UPDATE apg_returning SET name = $1 WHERE id = $2 RETURNING name", "SEVEN", 7
            )
            expect(name, "SEVEN", "updated name")
            status = await connection.execute("DELETE FROM apg_returning RETURNING id")
            expect(status, "DELETE 1", "command status")
        finally:
            await connection.close()

    run(body())


@check
def asyncpg_text_array_parameter(url):
    import asyncpg

    ddl(
        url,
        "CREATE TABLE apg_any_text (id INT PRIMARY KEY, name TEXT)",
        "INSERT INTO apg_any_text VALUES (1, 'one'), (2, 'two'), (3, 'a \"quoted\", {braced} name')",
    )

    async def body():
        connection = await asyncpg.connect(url)
        try:
            # asyncpg sends the list in PostgreSQL's binary array form.
            rows = await connection.fetch(
                "SELECT id FROM apg_any_text WHERE name = ANY($1::text[]) ORDER BY id",
                ["two", 'a "quoted", {braced} name', None],
            )
            expect([row["id"] for row in rows], [2, 3], "rows")
        finally:
            await connection.close()

    run(body())


@check
def asyncpg_int_array_parameter(url):
    import asyncpg

    ddl(
        url,
        "CREATE TABLE apg_any_int (id INT PRIMARY KEY, name TEXT)",
        "INSERT INTO apg_any_int VALUES (1, 'one'), (2, 'two'), (3, 'three')",
    )

    async def body():
        connection = await asyncpg.connect(url)
        try:
            # asyncpg first looks the array type up with its introspection query.
            rows = await connection.fetch(
                "SELECT name FROM apg_any_int WHERE id = ANY($1) ORDER BY id", [1, 3]
            )
            expect([row["name"] for row in rows], ["one", "three"], "rows")
        finally:
            await connection.close()

    run(body())


# --- SQLAlchemy 2 and pandas -------------------------------------------------------------------


def engine_url(url, dialect):
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(scheme=f"postgresql+{dialect}"))


@check
def sqlalchemy_connects_psycopg2(url):
    import sqlalchemy

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    with engine.connect() as connection:
        expect(connection.execute(sqlalchemy.text("SELECT 1")).scalar(), 1, "SELECT 1")
    engine.dispose()


@check
def sqlalchemy_connects_psycopg3(url):
    import sqlalchemy

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg"))
    with engine.connect() as connection:
        value = connection.execute(sqlalchemy.text("SELECT :x + 1"), {"x": 41}).scalar()
        expect(value, 42, "bound parameter")
    engine.dispose()


@check
def sqlalchemy_reflection(url):
    import sqlalchemy

    ddl(
        url,
        "CREATE TABLE sa_customers (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL, "
        "balance NUMERIC(12,2), joined DATE)",
        "CREATE TABLE sa_pairs (a INT, b TEXT, PRIMARY KEY (b, a))",
        "CREATE VIEW sa_names AS SELECT name FROM sa_customers",
    )
    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        inspector = sqlalchemy.inspect(engine)
        tables = set(inspector.get_table_names())
        if not {"sa_customers", "sa_pairs"} <= tables:
            raise AssertionError(f"tables: {sorted(tables)}")
        if "sa_names" not in inspector.get_view_names():
            raise AssertionError(f"views: {inspector.get_view_names()}")
        columns = inspector.get_columns("sa_customers")
        expect(
            [(c["name"], str(c["type"]), c["nullable"]) for c in columns],
            [
                ("id", "BIGINT", False),
                ("name", "VARCHAR(40)", False),
                ("balance", "NUMERIC(12, 2)", True),
                ("joined", "DATE", True),
            ],
            "columns",
        )
        expect(
            inspector.get_pk_constraint("sa_pairs")["constrained_columns"],
            ["b", "a"],
            "primary key",
        )
        table = sqlalchemy.Table("sa_customers", sqlalchemy.MetaData(), autoload_with=engine)
        expect([c.name for c in table.primary_key], ["id"], "reflected primary key")
    finally:
        engine.dispose()


@check
def sqlalchemy_core_create_all(url):
    import sqlalchemy

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    metadata = sqlalchemy.MetaData()
    items = sqlalchemy.Table(
        "sa_items",
        metadata,
        sqlalchemy.Column("id", sqlalchemy.Integer, primary_key=True, autoincrement=False),
        sqlalchemy.Column("name", sqlalchemy.String(30), nullable=False),
    )
    try:
        metadata.create_all(engine)  # DDL inside a transaction
        with engine.begin() as connection:
            connection.execute(items.insert(), [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}])
        with engine.connect() as connection:
            rows = connection.execute(sqlalchemy.select(items).order_by(items.c.id)).all()
            expect([tuple(row) for row in rows], [(1, "a"), (2, "b")], "rows")
    finally:
        engine.dispose()


@check
def sqlalchemy_orm_session(url):
    import sqlalchemy
    from sqlalchemy import orm

    ddl(url, "CREATE TABLE sa_users (id INT PRIMARY KEY, name TEXT NOT NULL, score INT)")

    class Base(orm.DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "sa_users"
        id = sqlalchemy.Column(sqlalchemy.Integer, primary_key=True, autoincrement=False)
        name = sqlalchemy.Column(sqlalchemy.Text, nullable=False)
        score = sqlalchemy.Column(sqlalchemy.Integer)

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        with orm.Session(engine) as session:
            session.add_all([User(id=1, name="ann", score=3), User(id=2, name="bob", score=5)])
            session.commit()
        with orm.Session(engine) as session:
            bob = session.get(User, 2)
            bob.score = 7
            session.commit()
        with orm.Session(engine) as session:
            users = session.scalars(sqlalchemy.select(User).order_by(User.id)).all()
            expect([(u.name, u.score) for u in users], [("ann", 3), ("bob", 7)], "users")
    finally:
        engine.dispose()


@check
def sqlalchemy_orm_autoincrement(url):
    """A model with a generated key (SERIAL) and server defaults, created by
    create_all: session.add() reads the key back, reflection sees the
    defaults."""
    import sqlalchemy
    from sqlalchemy import orm

    class Base(orm.DeclarativeBase):
        pass

    class Ticket(Base):
        __tablename__ = "sa_tickets"
        id = sqlalchemy.Column(sqlalchemy.Integer, primary_key=True)
        title = sqlalchemy.Column(sqlalchemy.String(50), nullable=False)
        state = sqlalchemy.Column(sqlalchemy.Text, server_default="open", nullable=False)
        votes = sqlalchemy.Column(sqlalchemy.Integer, server_default=sqlalchemy.text("0"))

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        Base.metadata.create_all(engine)
        with orm.Session(engine) as session:
            first, second = Ticket(title="a"), Ticket(title="b")
            session.add_all([first, second])
            session.commit()
            expect([first.id, second.id], [1, 2], "generated keys")
            expect([first.state, second.votes], ["open", 0], "server defaults")
        columns = {c["name"]: c for c in sqlalchemy.inspect(engine).get_columns("sa_tickets")}
        expect(columns["id"]["default"], "nextval('sa_tickets_id_seq'::regclass)", "id default")
        expect(columns["id"]["autoincrement"], True, "autoincrement")
        expect(columns["state"]["default"], "'open'::text", "state default")
        expect(columns["votes"]["default"], "0", "votes default")
    finally:
        engine.dispose()


@check
def sqlalchemy_unique_constraints(url):
    """Unique columns and a UniqueConstraint made by create_all: a duplicate
    raises IntegrityError (UniqueViolation) naming the constraint, the
    session goes on after rollback, and reflection lists the constraints."""
    import psycopg2
    import sqlalchemy
    from sqlalchemy import orm

    class Base(orm.DeclarativeBase):
        pass

    class Member(Base):
        __tablename__ = "sa_members"
        __table_args__ = (sqlalchemy.UniqueConstraint("org", "handle", name="uq_org_handle"),)
        id = sqlalchemy.Column(sqlalchemy.Integer, primary_key=True)
        email = sqlalchemy.Column(sqlalchemy.String(80), unique=True, nullable=False)
        org = sqlalchemy.Column(sqlalchemy.Integer)
        handle = sqlalchemy.Column(sqlalchemy.Text)

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        Base.metadata.create_all(engine)
        with orm.Session(engine) as session:
            session.add_all([Member(email="a@x", org=1, handle="ann"), Member(email="b@x", org=1, handle="bob")])
            session.commit()
            session.add(Member(email="a@x", org=2, handle="cy"))
            try:
                session.commit()
                raise AssertionError("a duplicate email was committed")
            except sqlalchemy.exc.IntegrityError as error:
                expect(isinstance(error.orig, psycopg2.errors.UniqueViolation), True, "UniqueViolation")
                expect(error.orig.diag.constraint_name, "sa_members_email_key", "constraint named")
                session.rollback()
            session.add(Member(email="c@x", org=2, handle="ann"))
            session.commit()
            expect(session.query(Member).count(), 3, "rows")
        inspector = sqlalchemy.inspect(engine)
        unique = sorted(
            (constraint["name"], tuple(constraint["column_names"]))
            for constraint in inspector.get_unique_constraints("sa_members")
        )
        expect(unique, [("sa_members_email_key", ("email",)), ("uq_org_handle", ("org", "handle"))], "unique constraints")
    finally:
        engine.dispose()


@check
def sqlalchemy_indexes(url):
    """Indexes made by create_all (index=True, an Index of two columns
    with a column name repeated in another) are used by lookups, and
    reflection lists them as PostgreSQL would."""
    import sqlalchemy
    from sqlalchemy import orm

    class Base(orm.DeclarativeBase):
        pass

    class Visit(Base):
        __tablename__ = "sa_visits"
        __table_args__ = (sqlalchemy.Index("ix_visits_city_day", "city", "day"),)
        id = sqlalchemy.Column(sqlalchemy.Integer, primary_key=True)
        email = sqlalchemy.Column(sqlalchemy.String(80), index=True)
        city = sqlalchemy.Column(sqlalchemy.Text)
        day = sqlalchemy.Column(sqlalchemy.Integer)

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        Base.metadata.create_all(engine)
        with orm.Session(engine) as session:
            session.add_all(
                [Visit(email=f"u{n % 7}@x", city=["oslo", "rome"][n % 2], day=n % 5) for n in range(40)]
            )
            session.commit()
            found = session.query(Visit).filter(Visit.email == "u3@x").count()
            expect(found, len([n for n in range(40) if n % 7 == 3]), "rows by email")
            found = session.query(Visit).filter(Visit.city == "rome", Visit.day == 1).count()
            expect(found, len([n for n in range(40) if n % 2 == 1 and n % 5 == 1]), "rows by city and day")
        inspector = sqlalchemy.inspect(engine)
        indexes = sorted(
            (index["name"], tuple(index["column_names"]), index["unique"])
            for index in inspector.get_indexes("sa_visits")
        )
        expect(
            indexes,
            [("ix_sa_visits_email", ("email",), False), ("ix_visits_city_day", ("city", "day"), False)],
            "reflected indexes",
        )
        Base.metadata.drop_all(engine)
    finally:
        engine.dispose()


@check
def django_foreign_key_index(url):
    """The SQL Django's migrate runs (psycopg 3) for a model with a
    ForeignKey without a database constraint (db_constraint=False) and a
    SlugField: the indexes it creates in the migration's transaction (the
    slug's twice, once with varchar_pattern_ops for LIKE), and a lookup by
    the foreign key."""
    import psycopg

    with psycopg.connect(url) as connection:
        for statement in [
            'CREATE TABLE "dj_authors" ("id" bigint NOT NULL PRIMARY KEY GENERATED BY DEFAULT '
            'AS IDENTITY, "name" varchar(40) NOT NULL)',
            'CREATE TABLE "dj_books" ("id" bigint NOT NULL PRIMARY KEY GENERATED BY DEFAULT '
            'AS IDENTITY, "title" varchar(80) NOT NULL, "slug" varchar(50) NOT NULL, '
            '"author_id" bigint NOT NULL)',
            'CREATE INDEX "dj_books_slug_5b2b1c1e" ON "dj_books" ("slug")',
            'CREATE INDEX "dj_books_slug_5b2b1c1e_like" ON "dj_books" ("slug" varchar_pattern_ops)',
            'CREATE INDEX "dj_books_author_id_8a5e4f2d" ON "dj_books" ("author_id")',
        ]:
            connection.execute(statement)
        connection.commit()
        connection.execute("INSERT INTO dj_authors (name) VALUES ('ann'), ('bob')")
        connection.execute(
            "INSERT INTO dj_books (title, slug, author_id) "
            "SELECT 'b' || n, 's' || n, 1 + n % 2 FROM generate_series(1, 30) AS n"
        )
        connection.commit()
        rows = connection.execute(
            "SELECT count(*) FROM dj_books WHERE author_id = %s", (2,)
        ).fetchone()
        expect(rows, (15,), "books by author")


@check
def asyncpg_upsert_on_unique_column(url):
    """INSERT ... ON CONFLICT (email) DO UPDATE with parameters, the conflict
    found through a UNIQUE column rather than the key."""
    import asyncio

    import asyncpg

    async def run():
        connection = await asyncpg.connect(url)
        try:
            await connection.execute(
                "CREATE TABLE ap_accounts (id BIGSERIAL PRIMARY KEY, email TEXT UNIQUE NOT NULL, logins INT NOT NULL DEFAULT 1)"
            )
            upsert = (
                "INSERT INTO ap_accounts (email) VALUES ($1) "
                "ON CONFLICT (email) DO UPDATE SET logins = ap_accounts.logins + 1 RETURNING id, logins"
            )
            first = await connection.fetchrow(upsert, "a@x")
            await connection.fetchrow(upsert, "b@x")
            again = await connection.fetchrow(upsert, "a@x")
            expect((again["id"], again["logins"]), (first["id"], 2), "the same row, updated")
            try:
                await connection.execute("UPDATE ap_accounts SET email = $1 WHERE email = $2", "a@x", "b@x")
                raise AssertionError("a duplicate email was written")
            except asyncpg.exceptions.UniqueViolationError as error:
                expect(error.constraint_name, "ap_accounts_email_key", "constraint name")
        finally:
            await connection.close()

    asyncio.run(run())


@check
def psycopg_identity_returning(url):
    """Django's key: BIGINT GENERATED BY DEFAULT AS IDENTITY, read back
    with RETURNING."""
    import psycopg

    with psycopg.connect(url) as connection:
        connection.execute(
            "CREATE TABLE dj_posts (id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, "
            "title VARCHAR(80) NOT NULL, published BOOLEAN DEFAULT false)"
        )
        connection.commit()
        ids = [
            connection.execute(
                "INSERT INTO dj_posts (title) VALUES (%s) RETURNING id", (title,)
            ).fetchone()[0]
            for title in ("x", "y")
        ]
        connection.commit()
        expect(ids, [1, 2], "ids")
        row = connection.execute(
            "SELECT published, pg_get_serial_sequence('dj_posts', 'id') FROM dj_posts WHERE id = 2"
        ).fetchone()
        expect(tuple(row), (False, "public.dj_posts_id_seq"), "default and sequence")


@check
def alembic_migration_adds_and_drops_columns(url):
    """An Alembic migration in one transaction: op.add_column with a server
    default (filling the existing rows), op.alter_column dropping the
    default, op.drop_column; then reflection sees the new table."""
    import sqlalchemy
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    ddl(
        url,
        "CREATE TABLE al_accounts (id INT PRIMARY KEY, legacy TEXT)",
        "INSERT INTO al_accounts VALUES (1, 'x'), (2, 'y')",
    )
    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        with engine.begin() as connection:
            op = Operations(MigrationContext.configure(connection))
            op.add_column(
                "al_accounts",
                sqlalchemy.Column(
                    "plan", sqlalchemy.String(20), server_default="free", nullable=False
                ),
            )
            op.alter_column("al_accounts", "plan", server_default=None)
            op.drop_column("al_accounts", "legacy")
        with engine.connect() as connection:
            rows = connection.execute(
                sqlalchemy.text("SELECT * FROM al_accounts ORDER BY id")
            ).all()
            expect([tuple(row) for row in rows], [(1, "free"), (2, "free")], "rows")
        columns = {c["name"]: c for c in sqlalchemy.inspect(engine).get_columns("al_accounts")}
        expect(sorted(columns), ["id", "plan"], "columns")
        expect(
            (str(columns["plan"]["type"]), columns["plan"]["nullable"], columns["plan"]["default"]),
            ("VARCHAR(20)", False, None),
            "the new column",
        )
    finally:
        engine.dispose()


@check
def django_add_and_remove_field(url):
    """The SQL Django's migrate runs (psycopg 3, its driver) for
    AddField(IntegerField(default=0)) and RemoveField, in the migration's
    transaction; a rolled-back migration leaves the table as it was."""
    import psycopg

    with psycopg.connect(url) as connection:
        connection.execute(
            'CREATE TABLE "dj_pages" ("id" bigint NOT NULL PRIMARY KEY GENERATED BY DEFAULT '
            'AS IDENTITY, "title" varchar(80) NOT NULL, "draft" boolean NOT NULL)'
        )
        connection.execute(
            "INSERT INTO dj_pages (title, draft) VALUES ('a', true), ('b', false)"
        )
        connection.commit()
        migration = [
            'ALTER TABLE "dj_pages" ADD COLUMN "views" integer DEFAULT 0 NOT NULL',
            'ALTER TABLE "dj_pages" ALTER COLUMN "views" DROP DEFAULT',
            'ALTER TABLE "dj_pages" DROP COLUMN "draft" CASCADE',
        ]
        for statement in migration:
            connection.execute(statement)
        connection.rollback()
        rows = connection.execute("SELECT * FROM dj_pages ORDER BY id").fetchall()
        expect(rows, [(1, "a", True), (2, "b", False)], "rows after ROLLBACK")
        connection.rollback()
        for statement in migration:
            connection.execute(statement)
        connection.commit()
        rows = connection.execute("SELECT * FROM dj_pages ORDER BY id").fetchall()
        expect(rows, [(1, "a", 0), (2, "b", 0)], "rows after COMMIT")
        connection.rollback()
        try:
            connection.execute("INSERT INTO dj_pages (title) VALUES ('c')")
        except psycopg.errors.NotNullViolation:
            connection.rollback()
        else:
            raise AssertionError("an INSERT without the new NOT NULL column succeeded")


@check
def pandas_read_sql(url):
    import pandas
    import sqlalchemy

    ddl(
        url,
        "CREATE TABLE pd_read (id INT PRIMARY KEY, amount DOUBLE PRECISION, label TEXT)",
        "INSERT INTO pd_read VALUES (1, 1.5, 'x'), (2, 2.5, 'y')",
    )
    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        frame = pandas.read_sql("SELECT * FROM pd_read ORDER BY id", engine)
        expect(list(frame.columns), ["id", "amount", "label"], "columns")
        expect(frame["amount"].sum(), 4.0, "sum")
        frame = pandas.read_sql_table("pd_read", engine)
        expect(len(frame), 2, "rows of read_sql_table")
    finally:
        engine.dispose()


@check
def pandas_to_sql(url):
    import pandas
    import sqlalchemy

    engine = sqlalchemy.create_engine(engine_url(url, "psycopg2"))
    try:
        frame = pandas.DataFrame({"id": [1, 2, 3], "name": ["a", "b", "c"], "x": [0.5, 1.5, 2.5]})
        frame.to_sql("pd_written", engine, index=False)
        back = pandas.read_sql("SELECT * FROM pd_written ORDER BY id", engine)
        expect(back.to_dict("list"), frame.to_dict("list"), "round trip")
    finally:
        engine.dispose()


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    url = sys.argv[1]
    chosen = set(sys.argv[2:])
    for function in CHECKS:
        if chosen and function.__name__ not in chosen:
            continue
        try:
            function(url)
            outcome = {"check": function.__name__, "ok": True}
        except Exception as error:  # noqa: BLE001 - every failure is reported, none stops the run
            last = traceback.extract_tb(error.__traceback__)[-1]
            outcome = {
                "check": function.__name__,
                "ok": False,
                "error": f"{type(error).__name__}: {error}".strip()[:2000]
                + f" (at {last.filename.rsplit('/', 1)[-1]}:{last.lineno})",
            }
        print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
