// What pgjdbc (the driver under DBeaver, Metabase and most JDBC tools) sees of one database.
//
// Run as `java -cp postgresql.jar JdbcClients.java URL USER PASSWORD SCHEMA`; prints one line
// per fact. The test runs it against cdcfusion and against PostgreSQL holding the same rows
// and compares the outputs line by line, so everything printed must be what PostgreSQL gives.

import java.math.BigDecimal;
import java.sql.*;
import java.util.*;

public class JdbcClients {
    static final StringBuilder out = new StringBuilder();

    static void line(String label, Object... values) {
        out.append(label);
        for (Object v : values) out.append(" | ").append(v);
        out.append('\n');
    }

    /**
     * Every row of `rs`, the named columns only, one line each; rows naming a changelog
     * (`t$changelog`, which PostgreSQL has no counterpart of) are left out.
     */
    static void rows(String label, ResultSet rs, String... columns) throws SQLException {
        List<String> all = new ArrayList<>();
        while (rs.next()) {
            StringBuilder row = new StringBuilder();
            for (String c : columns) row.append(c).append('=').append(rs.getString(c)).append(' ');
            if (row.indexOf("$changelog") < 0) all.add(row.toString().trim());
        }
        rs.close();
        line(label + ".count", all.size());
        for (String r : all) line(label, r);
    }

    static String typed(Object v) {
        if (v == null) return "null";
        String text = v instanceof byte[] ? HexFormat.of().formatHex((byte[]) v) : v.toString();
        return v.getClass().getSimpleName() + ":" + text;
    }

    public static void main(String[] args) throws Exception {
        String url = args[0], user = args[1], password = args[2], schema = args[3];
        try (Connection conn = DriverManager.getConnection(url, user, password)) {
            DatabaseMetaData md = conn.getMetaData();
            rows("catalogs", md.getCatalogs(), "TABLE_CAT");
            ResultSet schemas = md.getSchemas(null, schema);
            rows("schemas", schemas, "TABLE_SCHEM", "TABLE_CATALOG");
            rows("tables", md.getTables(null, schema, "%", new String[] {"TABLE"}),
                "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE");
            // Every table of every type, as a tool's tree of tables lists them.
            rows("allTables", md.getTables(null, schema, "%", null),
                "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE", "REMARKS");
            // Every column of every table (changelogs included in the query, as a tool asks,
            // though not printed), as DBeaver, DataGrip and Metabase read them.
            rows("columns", md.getColumns(null, schema, "%", "%"),
                "TABLE_NAME", "COLUMN_NAME", "DATA_TYPE", "TYPE_NAME", "COLUMN_SIZE",
                "DECIMAL_DIGITS", "NUM_PREC_RADIX", "NULLABLE", "REMARKS", "COLUMN_DEF",
                "CHAR_OCTET_LENGTH", "ORDINAL_POSITION", "IS_NULLABLE", "IS_AUTOINCREMENT",
                "IS_GENERATEDCOLUMN");
            rows("primaryKeys", md.getPrimaryKeys(null, schema, "lines"),
                "TABLE_NAME", "COLUMN_NAME", "KEY_SEQ", "PK_NAME");
            // PAGES is the index's size in PostgreSQL's pages, which has no counterpart here.
            for (String table : new String[] {"items", "lines", "kinds"}) {
                rows("indexInfo", md.getIndexInfo(null, schema, table, false, true),
                    "TABLE_NAME", "NON_UNIQUE", "INDEX_QUALIFIER", "INDEX_NAME", "TYPE",
                    "ORDINAL_POSITION", "COLUMN_NAME", "ASC_OR_DESC", "CARDINALITY",
                    "FILTER_CONDITION");
            }
            rows("importedKeys", md.getImportedKeys(null, schema, "lines"),
                "PKTABLE_NAME", "FKCOLUMN_NAME");
            rows("exportedKeys", md.getExportedKeys(null, schema, "items"),
                "FKTABLE_NAME", "FKCOLUMN_NAME");
            rows("bestRowIdentifier",
                md.getBestRowIdentifier(null, schema, "items", DatabaseMetaData.bestRowSession, true),
                "COLUMN_NAME", "DATA_TYPE", "TYPE_NAME");
            line("identifierQuote", md.getIdentifierQuoteString());
            line("product", md.getDatabaseProductName());

            // Result metadata and typed values of plain queries: columns, a window function,
            // renamed columns of an aliased table, averages of integers (numeric).
            String[] queries = {
                "SELECT id, name, price, qty, ratio, created, day, doc, note, data, "
                    + "count(*) OVER () AS n FROM " + schema + ".items WHERE id <= 2 ORDER BY id",
                "SELECT i.id AS key, i.name AS label, l.line FROM " + schema + ".items i JOIN "
                    + schema + ".lines l ON l.item_id = i.id ORDER BY key",
                "SELECT avg(id) AS mean_id, avg(qty), avg(price) AS mean_price FROM " + schema + ".items",
            };
            for (String query : queries)
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery(query)) {
                ResultSetMetaData rm = rs.getMetaData();
                for (int i = 1; i <= rm.getColumnCount(); i++) {
                    String table = rm.getTableName(i);
                    line("meta", rm.getColumnLabel(i), rm.getColumnTypeName(i), rm.getColumnType(i),
                        rm.getPrecision(i), rm.getScale(i), rm.isNullable(i),
                        table.isEmpty() ? "-" : rm.getSchemaName(i) + "." + table,
                        rm.getColumnClassName(i), rm.isAutoIncrement(i));
                }
                while (rs.next()) {
                    List<String> values = new ArrayList<>();
                    for (int i = 1; i <= rm.getColumnCount(); i++) values.add(typed(rs.getObject(i)));
                    line("row", String.join(", ", values));
                }
            }

            // The text of every temporal and float type, as the server writes it.
            try (Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("SELECT * FROM " + schema + ".kinds ORDER BY id")) {
                ResultSetMetaData rm = rs.getMetaData();
                while (rs.next()) {
                    List<String> values = new ArrayList<>();
                    for (int i = 1; i <= rm.getColumnCount(); i++)
                        values.add(rm.getColumnLabel(i) + "=" + rs.getString(i));
                    line("text", String.join(", ", values));
                }
            }

            // Prepared statements with typed parameters; pgjdbc switches to a named server
            // statement after five executions, so run it more often than that.
            try (PreparedStatement ps = conn.prepareStatement(
                     "SELECT name, price FROM " + schema + ".items WHERE id = ? AND price >= ? AND name LIKE ?")) {
                for (int i = 1; i <= 7; i++) {
                    ps.setInt(1, i);
                    ps.setBigDecimal(2, new BigDecimal("1.00"));
                    ps.setString(3, "item%");
                    try (ResultSet rs = ps.executeQuery()) {
                        while (rs.next()) line("prepared", i, rs.getString(1), rs.getBigDecimal(2));
                    }
                }
            }
            try (PreparedStatement ps = conn.prepareStatement(
                     "SELECT count(*) FROM " + schema + ".items WHERE created < ? AND day >= ?")) {
                ps.setTimestamp(1, Timestamp.valueOf("2024-01-02 08:00:00"));
                ps.setDate(2, java.sql.Date.valueOf("2024-03-02"));
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    line("prepared.time", rs.getLong(1));
                }
            }
            try (PreparedStatement ps = conn.prepareStatement(
                     "SELECT id FROM " + schema + ".items WHERE id = ANY(?) ORDER BY id")) {
                ps.setArray(1, conn.createArrayOf("int4", new Integer[] {2, 4, 99}));
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) line("prepared.any", rs.getInt(1));
                }
            }

            // Cursor fetch: with autocommit off and a fetch size, pgjdbc reads through a portal
            // a few rows at a time.
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.setFetchSize(5);
                try (ResultSet rs = st.executeQuery("SELECT id FROM " + schema + ".items ORDER BY id")) {
                    int n = 0;
                    long sum = 0;
                    while (rs.next()) {
                        n++;
                        sum += rs.getLong(1);
                    }
                    line("fetch", n, sum);
                }
            }
            conn.rollback();
        }
        System.out.print(out);
    }
}
