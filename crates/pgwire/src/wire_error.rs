//! [`RsError`] → PostgreSQL `ErrorResponse` fields.
//!
//! The one mapping at the wire: severity (`ERROR`, or `FATAL` for startup
//! failures that end the connection), `code` = the error code's SQLSTATE,
//! `message` = `RS-XXXX name: message` (the error's `Display`), `detail` =
//! the error's detail, `hint` = the code's `next_steps`.

use pgwire::error::{ErrorInfo, PgWireError, SEVERITY_ERROR, SEVERITY_FATAL};
use rockstream_types::RsError;

/// The ErrorResponse fields for `error` at `severity`.
pub(crate) fn error_info(error: &RsError, severity: &str) -> ErrorInfo {
    let mut info = ErrorInfo::new(
        severity.to_owned(),
        error.sqlstate().to_owned(),
        error.to_string(),
    );
    info.detail = error.detail.clone();
    info.hint = Some(error.next_steps().to_owned());
    if let Some((table, constraint)) = &error.constraint {
        info.schema = Some("public".to_owned());
        info.table = Some(table.clone());
        info.constraint = Some(constraint.clone());
    }
    info
}

/// A statement-level error: the session continues.
pub(crate) fn user_error(error: RsError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(&error, SEVERITY_ERROR)))
}

/// A connection-level error: the server closes the connection after sending it.
pub(crate) fn fatal_error(error: RsError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(&error, SEVERITY_FATAL)))
}

#[cfg(test)]
mod tests {
    //! Goal: every ErrorResponse field comes from the RsError and its code.
    use super::*;
    use rockstream_types::codes;

    #[test]
    fn fields_carry_code_message_detail_and_hint() {
        let error = RsError::new(&codes::UNKNOWN_DATABASE, "database \"nope\" does not exist")
            .with_detail("known databases: default");
        let info = error_info(&error, SEVERITY_FATAL);
        assert_eq!(info.severity, "FATAL");
        assert_eq!(info.code, "3D000");
        assert_eq!(
            info.message,
            "RS-2022 session.unknown_database: database \"nope\" does not exist"
        );
        assert_eq!(info.detail.as_deref(), Some("known databases: default"));
        assert_eq!(
            info.hint.as_deref(),
            Some(codes::UNKNOWN_DATABASE.next_steps)
        );
    }

    #[test]
    fn user_and_fatal_errors_differ_only_in_severity() {
        let error = RsError::new(&codes::SYNTAX_ERROR, "near FROM");
        assert!(!user_error(error.clone()).is_fatal());
        assert!(fatal_error(error).is_fatal());
    }
}
