//! `CREATE ROLE` / `CREATE USER`, `ALTER ROLE`, `DROP ROLE`: who may log in
//! when the server requires passwords (`rockstream start --auth password`).
//!
//! A password is kept as its SCRAM-SHA-256 verifier
//! ([`rockstream_pgwire::scram_verifier`]), or as given when it already is
//! one (as PostgreSQL takes a pre-hashed password). Privileges are not
//! modelled: every role may do everything, so the options that grant them
//! are accepted and those that withhold them refused.

use std::sync::Arc;

use datafusion::sql::sqlparser::ast::{
    AlterRoleOperation, CreateRole, Expr as SqlExpr, ObjectName, Password, RoleOption, Value,
};
use rockstream_control::{Database, Role, RoleChange};
use rockstream_pgwire::{is_scram_verifier, scram_verifier, Passwords, StatementResult};
use rockstream_types::{codes, RsError, RsResult};

use crate::ddl::unqualified_name;

/// The password verifiers of the catalog's login roles.
pub struct CatalogPasswords {
    database: Arc<Database>,
}

impl std::fmt::Debug for CatalogPasswords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CatalogPasswords")
    }
}

impl CatalogPasswords {
    pub fn new(database: Arc<Database>) -> CatalogPasswords {
        CatalogPasswords { database }
    }
}

impl Passwords for CatalogPasswords {
    fn verifier(&self, user: &str) -> Option<String> {
        self.database
            .role(user)
            .filter(|role| role.login)
            .and_then(|role| role.password)
    }
}

/// `CREATE ROLE name [WITH] options` (`CREATE USER` arrives as one with
/// `LOGIN` unless it says otherwise).
pub(crate) async fn create_role(
    database: &Database,
    create: &CreateRole,
) -> RsResult<StatementResult> {
    refuse_unsupported_create(create)?;
    let password = match &create.password {
        Some(password) => stored_password(password)?,
        None => None,
    };
    for name in &create.names {
        let role = Role {
            name: unqualified_name(name, "role")?,
            login: create.login.unwrap_or(false),
            password: password.clone(),
        };
        match database.create_role(role).await {
            Err(error)
                if create.if_not_exists && error.code.number == codes::DUPLICATE_ROLE.number => {}
            other => other?,
        }
    }
    Ok(StatementResult::command("CREATE ROLE"))
}

/// `ALTER ROLE name [WITH] options`.
pub(crate) async fn alter_role(
    database: &Database,
    name: &str,
    operation: &AlterRoleOperation,
) -> RsResult<StatementResult> {
    let AlterRoleOperation::WithOptions { options } = operation else {
        return Err(unsupported(&format!("ALTER ROLE {name} {operation}")));
    };
    let mut change = RoleChange::default();
    for option in options {
        match option {
            RoleOption::Login(login) => change.login = Some(*login),
            RoleOption::Password(password) => change.password = Some(stored_password(password)?),
            other => granted_option(other)?,
        }
    }
    database.alter_role(name, change).await?;
    Ok(StatementResult::command("ALTER ROLE"))
}

/// `DROP ROLE [IF EXISTS] name, …`.
pub(crate) async fn drop_roles(
    database: &Database,
    names: &[ObjectName],
    if_exists: bool,
) -> RsResult<StatementResult> {
    for name in names {
        database
            .drop_role(&unqualified_name(name, "role")?, if_exists)
            .await?;
    }
    Ok(StatementResult::command("DROP ROLE"))
}

/// What is stored for a password: its verifier (`None` for `PASSWORD
/// NULL`, which leaves the role no password login).
fn stored_password(password: &Password) -> RsResult<Option<String>> {
    let text = match password {
        Password::NullPassword => return Ok(None),
        Password::Password(SqlExpr::Value(value)) => match &value.value {
            Value::SingleQuotedString(text) => text.clone(),
            Value::Null => return Ok(None),
            _ => return Err(password_literal()),
        },
        Password::Password(_) => return Err(password_literal()),
    };
    if text.is_empty() {
        // As PostgreSQL: an empty password is no password (it would let
        // anyone in who sends none).
        return Ok(None);
    }
    if is_scram_verifier(&text) {
        return Ok(Some(text));
    }
    if text.len() == 35 && text.starts_with("md5") {
        return Err(unsupported(
            "MD5 password hashes are not supported: give the password, or its SCRAM-SHA-256 verifier",
        ));
    }
    Ok(Some(scram_verifier(&text)))
}

fn password_literal() -> RsError {
    RsError::new(
        &codes::SYNTAX_ERROR,
        "a role's PASSWORD is a string literal or NULL",
    )
}

/// Options that grant privileges every role has are accepted; the rest
/// would promise what is not enforced.
fn granted_option(option: &RoleOption) -> RsResult<()> {
    match option {
        RoleOption::SuperUser(true)
        | RoleOption::CreateDB(true)
        | RoleOption::CreateRole(true)
        | RoleOption::Inherit(true) => Ok(()),
        other => Err(unsupported(&format!(
            "role option {other} is not supported: every role has every privilege"
        ))),
    }
}

fn refuse_unsupported_create(create: &CreateRole) -> RsResult<()> {
    let withheld = [
        ("NOSUPERUSER", create.superuser == Some(false)),
        ("NOCREATEDB", create.create_db == Some(false)),
        ("NOCREATEROLE", create.create_role == Some(false)),
        ("NOINHERIT", create.inherit == Some(false)),
        ("REPLICATION", create.replication.is_some()),
        ("BYPASSRLS", create.bypassrls.is_some()),
        ("CONNECTION LIMIT", create.connection_limit.is_some()),
        ("VALID UNTIL", create.valid_until.is_some()),
        (
            "IN ROLE",
            !create.in_role.is_empty() || !create.in_group.is_empty(),
        ),
        (
            "ROLE / ADMIN",
            !create.role.is_empty() || !create.user.is_empty() || !create.admin.is_empty(),
        ),
    ];
    match withheld.iter().find(|(_, given)| *given) {
        Some((option, _)) => Err(unsupported(&format!(
            "role option {option} is not supported: every role has every privilege, and roles have no members"
        ))),
        None => Ok(()),
    }
}

fn unsupported(message: &str) -> RsError {
    RsError::new(&codes::UNSUPPORTED_STATEMENT, message)
}
