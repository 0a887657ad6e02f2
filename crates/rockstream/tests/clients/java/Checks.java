// Client-compatibility checks: what Java applications and tools do with pgjdbc (Debian's
// libpostgresql-jdbc-java): DatabaseMetaData as DBeaver, DataGrip and Hibernate read it, batch
// PreparedStatements with autocommit off, CopyManager, savepoints.
//
// Usage: java -cp /usr/share/java/postgresql.jar Checks.java POSTGRESQL_URL [CHECK ...]
//
// Each check uses the driver with its default settings, the way an application would, and
// asserts what PostgreSQL answers. The same program runs against PostgreSQL and against
// RockStream (`it::clients` runs both); a check that fails on PostgreSQL is a wrong check.
// Tables a check needs are created first (a check's setup), named after the check.
//
// Prints one JSON object per check on its own line: {"check": name, "ok": bool, "error": text}.
// Exits 0 once every check has run, whatever their outcome (the caller judges them).

import java.io.StringReader;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.net.URI;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.Date;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Timestamp;
import java.sql.Types;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;

public class Checks {
    interface Check {
        void run(String url) throws Exception;
    }

    static final Map<String, Check> CHECKS = new LinkedHashMap<>();

    static void expect(Object actual, Object expected, String what) {
        if (!Objects.equals(actual, expected)) {
            throw new AssertionError(what + ": expected " + expected + ", got " + actual);
        }
    }

    /// A check's setup: statements over their own autocommit connection.
    static void setup(String url, String... statements) throws SQLException {
        try (Connection connection = DriverManager.getConnection(url);
                Statement statement = connection.createStatement()) {
            for (String sql : statements) {
                statement.execute(sql);
            }
        }
    }

    /// The values of column `column` of every row `rows` yields, as strings.
    static List<String> column(ResultSet rows, String column) throws SQLException {
        List<String> values = new ArrayList<>();
        while (rows.next()) {
            values.add(rows.getString(column));
        }
        rows.close();
        return values;
    }

    static {
        CHECKS.put("jdbc_version", url -> {
            try (Connection connection = DriverManager.getConnection(url)) {
                DatabaseMetaData metadata = connection.getMetaData();
                expect(metadata.getDatabaseProductName(), "PostgreSQL", "product name");
                expect(metadata.getDatabaseMajorVersion(), 15, "major version");
            }
        });

        CHECKS.put("jdbc_types_round_trip", url -> {
            setup(url, "CREATE TABLE jdbc_types (id BIGINT PRIMARY KEY, n INT, amount NUMERIC(12,2),"
                    + " label TEXT, day DATE, at TIMESTAMP, flag BOOLEAN, ratio DOUBLE PRECISION)");
            try (Connection connection = DriverManager.getConnection(url)) {
                try (PreparedStatement insert = connection.prepareStatement(
                        "INSERT INTO jdbc_types VALUES (?, ?, ?, ?, ?, ?, ?, ?)")) {
                    insert.setLong(1, 1);
                    insert.setInt(2, 42);
                    insert.setBigDecimal(3, new BigDecimal("1234.50"));
                    insert.setString(4, "naïve café");
                    insert.setDate(5, Date.valueOf("2000-02-29"));
                    insert.setTimestamp(6, Timestamp.valueOf("2024-02-29 13:45:06.789"));
                    insert.setBoolean(7, true);
                    insert.setDouble(8, 0.25);
                    expect(insert.executeUpdate(), 1, "rows inserted");
                    insert.setLong(1, 2);
                    for (int index = 2; index <= 8; index++) {
                        insert.setNull(index, Types.NULL);
                    }
                    insert.executeUpdate();
                }
                try (PreparedStatement select = connection.prepareStatement(
                        "SELECT * FROM jdbc_types WHERE id = ?")) {
                    select.setLong(1, 1);
                    try (ResultSet rows = select.executeQuery()) {
                        expect(rows.next(), true, "row 1");
                        expect(rows.getLong("id"), 1L, "id");
                        expect(rows.getInt("n"), 42, "n");
                        expect(rows.getBigDecimal("amount"), new BigDecimal("1234.50"), "amount");
                        expect(rows.getString("label"), "naïve café", "label");
                        expect(rows.getDate("day"), Date.valueOf("2000-02-29"), "day");
                        expect(rows.getTimestamp("at"), Timestamp.valueOf("2024-02-29 13:45:06.789"), "at");
                        expect(rows.getBoolean("flag"), true, "flag");
                        expect(rows.getDouble("ratio"), 0.25, "ratio");
                    }
                    select.setLong(1, 2);
                    try (ResultSet rows = select.executeQuery()) {
                        expect(rows.next(), true, "row 2");
                        rows.getInt("n");
                        expect(rows.wasNull(), true, "n is NULL");
                        expect(rows.getString("label"), null, "label is NULL");
                    }
                }
            }
        });

        CHECKS.put("jdbc_batch_with_autocommit_off", url -> {
            setup(url, "CREATE TABLE jdbc_batch (id INT PRIMARY KEY, name TEXT)");
            try (Connection connection = DriverManager.getConnection(url)) {
                connection.setAutoCommit(false);
                try (PreparedStatement insert = connection.prepareStatement(
                        "INSERT INTO jdbc_batch VALUES (?, ?)")) {
                    for (int id = 0; id < 500; id++) {
                        insert.setInt(1, id);
                        insert.setString(2, "n" + id);
                        insert.addBatch();
                    }
                    int[] counts = insert.executeBatch();
                    expect(counts.length, 500, "batch results");
                }
                connection.rollback();
                try (Statement statement = connection.createStatement();
                        ResultSet rows = statement.executeQuery("SELECT count(*) FROM jdbc_batch")) {
                    rows.next();
                    expect(rows.getLong(1), 0L, "rows after rollback");
                }
                try (PreparedStatement insert = connection.prepareStatement(
                        "INSERT INTO jdbc_batch VALUES (?, ?)")) {
                    for (int id = 0; id < 500; id++) {
                        insert.setInt(1, id);
                        insert.setString(2, "n" + id);
                        insert.addBatch();
                    }
                    insert.executeBatch();
                }
                connection.commit();
                try (Statement statement = connection.createStatement();
                        ResultSet rows = statement.executeQuery("SELECT count(*), sum(id) FROM jdbc_batch")) {
                    rows.next();
                    expect(rows.getLong(1), 500L, "rows after commit");
                    expect(rows.getLong(2), 124750L, "sum after commit");
                }
                connection.commit();
            }
        });

        CHECKS.put("jdbc_ddl_and_savepoints_with_autocommit_off", url -> {
            try (Connection connection = DriverManager.getConnection(url)) {
                connection.setAutoCommit(false);
                try (Statement statement = connection.createStatement()) {
                    statement.execute("CREATE TABLE jdbc_migrated (id INT PRIMARY KEY, note TEXT)");
                    statement.execute("INSERT INTO jdbc_migrated VALUES (1, 'kept')");
                    Savepoint savepoint = connection.setSavepoint();
                    statement.execute("INSERT INTO jdbc_migrated VALUES (2, 'undone')");
                    connection.rollback(savepoint);
                    connection.commit();
                    statement.execute("CREATE TABLE jdbc_abandoned (id INT)");
                    connection.rollback();
                    try (ResultSet rows = statement.executeQuery(
                            "SELECT table_name FROM information_schema.tables"
                                    + " WHERE table_name IN ('jdbc_migrated', 'jdbc_abandoned')")) {
                        expect(column(rows, "table_name"), List.of("jdbc_migrated"), "tables");
                    }
                    try (ResultSet rows = statement.executeQuery("SELECT note FROM jdbc_migrated")) {
                        expect(column(rows, "note"), List.of("kept"), "rows");
                    }
                }
                connection.commit();
            }
        });

        CHECKS.put("jdbc_metadata_tables_columns_keys", url -> {
            setup(url, "CREATE TABLE jdbc_meta (id BIGINT PRIMARY KEY, name VARCHAR(40) NOT NULL,"
                    + " amount NUMERIC(10,2))",
                    "CREATE VIEW jdbc_meta_view AS SELECT id, name FROM jdbc_meta");
            try (Connection connection = DriverManager.getConnection(url)) {
                DatabaseMetaData metadata = connection.getMetaData();
                expect(column(metadata.getTables(null, "public", "jdbc_meta%", new String[] {"TABLE"}),
                        "TABLE_NAME"), List.of("jdbc_meta"), "getTables(TABLE)");
                expect(column(metadata.getTables(null, "public", "jdbc_meta%", new String[] {"VIEW"}),
                        "TABLE_NAME"), List.of("jdbc_meta_view"), "getTables(VIEW)");
                List<String> columns = new ArrayList<>();
                try (ResultSet rows = metadata.getColumns(null, "public", "jdbc_meta", "%")) {
                    while (rows.next()) {
                        columns.add(rows.getString("COLUMN_NAME") + " " + rows.getString("TYPE_NAME")
                                + " " + rows.getInt("DATA_TYPE") + " " + rows.getString("IS_NULLABLE"));
                    }
                }
                expect(columns, List.of(
                        "id int8 " + Types.BIGINT + " NO",
                        "name varchar " + Types.VARCHAR + " NO",
                        "amount numeric " + Types.NUMERIC + " YES"), "getColumns");
                expect(column(metadata.getPrimaryKeys(null, "public", "jdbc_meta"), "COLUMN_NAME"),
                        List.of("id"), "getPrimaryKeys");
            }
        });

        CHECKS.put("jdbc_copy_manager", url -> {
            setup(url, "CREATE TABLE jdbc_copy (id INT PRIMARY KEY, name TEXT)");
            try (Connection connection = DriverManager.getConnection(url)) {
                CopyManager copy = connection.unwrap(PGConnection.class).getCopyAPI();
                StringBuilder csv = new StringBuilder();
                for (int id = 0; id < 1000; id++) {
                    csv.append(id).append(",\"name, ").append(id).append("\"\n");
                }
                long loaded = copy.copyIn("COPY jdbc_copy FROM STDIN (FORMAT csv)",
                        new StringReader(csv.toString()));
                expect(loaded, 1000L, "rows copied in");
                StringWriter out = new StringWriter();
                copy.copyOut("COPY (SELECT * FROM jdbc_copy WHERE id < 2 ORDER BY id) TO STDOUT (FORMAT csv)",
                        out);
                expect(out.toString(), "0,\"name, 0\"\n1,\"name, 1\"\n", "rows copied out");
            }
        });
    }

    static String json(String text) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : text.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }

    /// `postgresql://user[:password]@host:port/database` as a JDBC URL.
    static String jdbcUrl(String url) {
        URI uri = URI.create(url);
        String[] user = Objects.requireNonNullElse(uri.getUserInfo(), "postgres").split(":", 2);
        String jdbc = "jdbc:postgresql://" + uri.getHost() + ":" + uri.getPort() + uri.getPath()
                + "?user=" + user[0];
        return user.length > 1 ? jdbc + "&password=" + user[1] : jdbc;
    }

    public static void main(String[] arguments) {
        if (arguments.length < 1) {
            System.err.println("usage: java -cp postgresql.jar Checks.java POSTGRESQL_URL [CHECK ...]");
            System.exit(2);
        }
        String url = jdbcUrl(arguments[0]);
        List<String> chosen = List.of(arguments).subList(1, arguments.length);
        for (Map.Entry<String, Check> check : CHECKS.entrySet()) {
            if (!chosen.isEmpty() && !chosen.contains(check.getKey())) {
                continue;
            }
            String outcome;
            try {
                check.getValue().run(url);
                outcome = "{\"check\": " + json(check.getKey()) + ", \"ok\": true}";
            } catch (Throwable error) {
                StackTraceElement[] trace = error.getStackTrace();
                String at = trace.length > 0 ? " (at line " + trace[0].getLineNumber() + ")" : "";
                String message = (error.getClass().getSimpleName() + ": " + error.getMessage() + at);
                outcome = "{\"check\": " + json(check.getKey()) + ", \"ok\": false, \"error\": "
                        + json(message.length() > 2000 ? message.substring(0, 2000) : message) + "}";
            }
            System.out.println(outcome);
            System.out.flush();
        }
    }
}
