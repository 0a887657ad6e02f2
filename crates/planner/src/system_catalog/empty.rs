//! Catalog tables that RockStream has nothing to put in: no operator
//! classes (every index uses its column type's default), role memberships,
//! collations, row-level security policies, extended statistics,
//! publications, inheritance, triggers, rules, comments, partitioning,
//! foreign tables, sequence options or extensions exist. They resolve, with the
//! columns clients read, so that catalog queries naming them plan; and
//! [`crate::pg_compat`] answers a query that inner-joins one of them
//! without planning its select list, which often uses PostgreSQL-only
//! machinery (arrays of role oids, `pg_get_expr`, ...) over rows that
//! cannot exist.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema};

/// Each table with its columns; `o` an oid or number, `t` text, `b` a
/// boolean.
const TABLES: [(&str, &[(&str, char)]); 17] = [
    (
        "pg_opclass",
        &[
            ("oid", 'o'),
            ("opcmethod", 'o'),
            ("opcname", 't'),
            ("opcnamespace", 'o'),
            ("opcdefault", 'b'),
        ],
    ),
    (
        "pg_auth_members",
        &[
            ("oid", 'o'),
            ("roleid", 'o'),
            ("member", 'o'),
            ("grantor", 'o'),
        ],
    ),
    (
        "pg_collation",
        &[
            ("oid", 'o'),
            ("collname", 't'),
            ("collnamespace", 'o'),
            ("collprovider", 't'),
        ],
    ),
    (
        "pg_range",
        &[
            ("rngtypid", 'o'),
            ("rngsubtype", 'o'),
            ("rngmultitypid", 'o'),
            ("rngcollation", 'o'),
            ("rngsubopc", 'o'),
        ],
    ),
    (
        "pg_policy",
        &[
            ("oid", 'o'),
            ("polname", 't'),
            ("polrelid", 'o'),
            ("polcmd", 't'),
            ("polpermissive", 'b'),
            ("polroles", 't'),
            ("polqual", 't'),
            ("polwithcheck", 't'),
        ],
    ),
    (
        "pg_statistic_ext",
        &[
            ("oid", 'o'),
            ("stxrelid", 'o'),
            ("stxname", 't'),
            ("stxnamespace", 'o'),
            ("stxkind", 't'),
            ("stxstattarget", 'o'),
        ],
    ),
    (
        "pg_publication",
        &[
            ("oid", 'o'),
            ("pubname", 't'),
            ("pubowner", 'o'),
            ("puballtables", 'b'),
        ],
    ),
    (
        "pg_publication_namespace",
        &[("oid", 'o'), ("pnpubid", 'o'), ("pnnspid", 'o')],
    ),
    (
        "pg_publication_rel",
        &[
            ("oid", 'o'),
            ("prpubid", 'o'),
            ("prrelid", 'o'),
            ("prqual", 't'),
            ("prattrs", 't'),
        ],
    ),
    (
        "pg_inherits",
        &[
            ("inhrelid", 'o'),
            ("inhparent", 'o'),
            ("inhseqno", 'o'),
            ("inhdetachpending", 'b'),
        ],
    ),
    (
        "pg_trigger",
        &[
            ("oid", 'o'),
            ("tgrelid", 'o'),
            ("tgname", 't'),
            ("tgenabled", 't'),
            ("tgisinternal", 'b'),
        ],
    ),
    (
        "pg_rewrite",
        &[
            ("oid", 'o'),
            ("rulename", 't'),
            ("ev_class", 'o'),
            ("ev_type", 't'),
        ],
    ),
    (
        "pg_description",
        &[
            ("objoid", 'o'),
            ("classoid", 'o'),
            ("objsubid", 'o'),
            ("description", 't'),
        ],
    ),
    (
        "pg_partitioned_table",
        &[("partrelid", 'o'), ("partstrat", 't'), ("partnatts", 'o')],
    ),
    (
        "pg_foreign_table",
        &[("ftrelid", 'o'), ("ftserver", 'o'), ("ftoptions", 't')],
    ),
    (
        "pg_sequence",
        &[
            ("seqrelid", 'o'),
            ("seqtypid", 'o'),
            ("seqstart", 'o'),
            ("seqincrement", 'o'),
        ],
    ),
    (
        "pg_extension",
        &[
            ("oid", 'o'),
            ("extname", 't'),
            ("extnamespace", 'o'),
            ("extversion", 't'),
        ],
    ),
];

/// Whether `name` is one of the always-empty `pg_catalog` tables.
pub(crate) fn is_empty_table(name: &str) -> bool {
    TABLES.iter().any(|(table, _)| *table == name)
}

pub(crate) fn table_names() -> impl Iterator<Item = &'static str> {
    TABLES.iter().map(|(name, _)| *name)
}

/// The (row-less) table `name`, if it is one of these.
pub(crate) fn empty_table(name: &str) -> Option<RecordBatch> {
    let (_, columns) = TABLES.iter().find(|(table, _)| *table == name)?;
    let fields: Vec<Field> = columns
        .iter()
        .map(|(column, kind)| {
            let data_type = match kind {
                'o' => DataType::Int64,
                'b' => DataType::Boolean,
                _ => DataType::Utf8,
            };
            Field::new(*column, data_type, true)
        })
        .collect();
    Some(RecordBatch::new_empty(Arc::new(Schema::new(fields))))
}
