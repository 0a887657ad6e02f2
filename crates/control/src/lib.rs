//! The control plane of the embedded profile: the catalog (its own SlateDB),
//! DDL as catalog transactions, and the follower that installs and removes
//! dataflows as an implication of committed catalog changes
//! (ARCHITECTURE principle 3). Restart replays the catalog in creation order.

mod catalog;
mod control_db;
mod database;
mod follower;
mod functions;
mod namespaces;
mod resolver;
mod roles;
mod sequences;

pub use catalog::{
    nextval_expression, CatalogEntry, ColumnDef, Identity, ObjectKind, OwnedSequence, TableIndex,
    WatermarkDef, DEFAULT_NAMESPACE, REWRITTEN_BY_PENDING,
};
pub use database::{
    Alteration, Altered, Database, DeclaredIndex, DropObject, Dropped, Generated, LateRows,
    NewTable, NewView, OpenOptions, PendingCatalog, Rename, TableLayouts,
    FAILPOINT_DDL_TRANSACTION,
};
pub use functions::{FunctionArgument, FunctionEntry, ANY_NUMERIC};
pub use namespaces::Attachment;
pub use resolver::{arrow_schema, inline_view, plan_inline_view, CatalogResolver};
pub use roles::{Role, RoleChange};
pub use sequences::{next_after_set, take_next, SequenceRef, Sequences, PRELOGGED};
