//! Who may connect: SCRAM-SHA-256 password authentication and TLS.
//!
//! Off by default ([`Security::default`]: every user is trusted, no TLS),
//! as the embedded profile listens on loopback only. With passwords on, a
//! client proves it knows its role's password without sending it
//! (`SCRAM-SHA-256`, PostgreSQL's default method); the server keeps only a
//! verifier ([`scram_verifier`]), in PostgreSQL's `rolpassword` form.
//! With a certificate, clients may switch to TLS before starting up
//! (`sslmode=require`); TLS is not required of them, and SCRAM's channel
//! binding (`SCRAM-SHA-256-PLUS`) is not offered.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth, ScramSecret};
use pgwire::api::auth::{AuthSource, LoginInfo, Password};
use pgwire::error::{PgWireError, PgWireResult};
use rand::RngCore;
use rockstream_types::{codes, RsError};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::ServerConfig;

/// PBKDF2 iterations of a new verifier (PostgreSQL's `scram_iterations`
/// default).
pub const SCRAM_ITERATIONS: usize = 4096;
/// Bytes of a new verifier's salt (PostgreSQL's).
const SALT_BYTES: usize = 16;

/// Where the password verifiers of login roles come from.
pub trait Passwords: Send + Sync + Debug {
    /// The SCRAM verifier of `user`'s password, if `user` is a role that
    /// may log in and has a password.
    fn verifier(&self, user: &str) -> Option<String>;
}

/// How the server admits connections.
#[derive(Clone, Default)]
pub struct Security {
    /// Password authentication (`None`: trust every user).
    pub passwords: Option<Arc<dyn Passwords>>,
    /// TLS, offered to clients that ask (`None`: refused).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl Security {
    /// The SCRAM mechanism over `passwords`, if passwords are on.
    pub(crate) fn scram(&self) -> Option<ScramAuth> {
        let passwords = self.passwords.clone()?;
        let mut scram = ScramAuth::new(Arc::new(VerifierSource::new(passwords)));
        scram.set_iterations(SCRAM_ITERATIONS);
        Some(scram)
    }
}

/// The verifier of `password`: `SCRAM-SHA-256$iterations:salt$stored_key:server_key`,
/// each part base64, as PostgreSQL stores it.
pub fn scram_verifier(password: &str) -> String {
    let mut salt = [0_u8; SALT_BYTES];
    rand::rng().fill_bytes(&mut salt);
    let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
    let ScramSecret::Verifier {
        salt,
        iterations,
        stored_key,
        server_key,
    } = ScramSecret::verifier_from_salted_password(salt.to_vec(), salted, SCRAM_ITERATIONS)
    else {
        unreachable!("verifier_from_salted_password returns a verifier")
    };
    format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        STANDARD.encode(salt),
        STANDARD.encode(stored_key),
        STANDARD.encode(server_key)
    )
}

/// Whether `text` is a SCRAM-SHA-256 verifier (taken as a password's
/// stored form, as PostgreSQL takes a pre-hashed password).
pub fn is_scram_verifier(text: &str) -> bool {
    parse_verifier(text).is_some()
}

/// [`scram_verifier`]'s output read back.
fn parse_verifier(verifier: &str) -> Option<ScramSecret> {
    let rest = verifier.strip_prefix("SCRAM-SHA-256$")?;
    let (iterations_salt, keys) = rest.split_once('$')?;
    let (iterations, salt) = iterations_salt.split_once(':')?;
    let (stored_key, server_key) = keys.split_once(':')?;
    Some(ScramSecret::Verifier {
        salt: STANDARD.decode(salt).ok()?,
        iterations: iterations.parse().ok()?,
        stored_key: STANDARD.decode(stored_key).ok()?,
        server_key: STANDARD.decode(server_key).ok()?,
    })
}

/// The error a failed login gets, whatever failed (no such role, no
/// password, a wrong one), as PostgreSQL words it.
pub(crate) fn authentication_failed(user: &str) -> RsError {
    RsError::new(
        &codes::PASSWORD_AUTHENTICATION_FAILED,
        format!("password authentication failed for user \"{user}\""),
    )
}

#[derive(Debug)]
struct VerifierSource {
    passwords: Arc<dyn Passwords>,
    /// Keys the made-up verifiers of users that cannot log in.
    mock_key: [u8; 32],
}

impl VerifierSource {
    fn new(passwords: Arc<dyn Passwords>) -> VerifierSource {
        let mut mock_key = [0_u8; 32];
        rand::rng().fill_bytes(&mut mock_key);
        VerifierSource {
            passwords,
            mock_key,
        }
    }

    /// A verifier no password matches, its salt fixed per user (as
    /// PostgreSQL's mock authentication): a user that does not exist, may
    /// not log in or has no password fails at the same step, with the same
    /// salt every time, as a wrong password does, so the exchange does not
    /// tell which roles exist.
    fn mock(&self, user: &str) -> ScramSecret {
        let keyed = gen_salted_password(user, &self.mock_key, 1);
        let mut key = [0_u8; 32];
        rand::rng().fill_bytes(&mut key);
        ScramSecret::Verifier {
            salt: keyed[..SALT_BYTES].to_vec(),
            iterations: SCRAM_ITERATIONS,
            stored_key: key.to_vec(),
            server_key: key.to_vec(),
        }
    }
}

#[async_trait]
impl AuthSource for VerifierSource {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // Only verifiers are kept: SCRAM is the one method offered.
        Err(PgWireError::InvalidPassword(
            login.user().unwrap_or_default().to_owned(),
        ))
    }

    async fn get_scram_secret(&self, login: &LoginInfo) -> PgWireResult<(ScramSecret, Option<()>)> {
        let user = login.user().unwrap_or_default();
        let secret = self
            .passwords
            .verifier(user)
            .as_deref()
            .and_then(parse_verifier)
            .unwrap_or_else(|| self.mock(user));
        Ok((secret, None))
    }
}

/// A TLS acceptor serving the certificate chain in `certificate` and the
/// private key in `key` (PEM files).
pub fn tls_acceptor(certificate: &Path, key: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certificate)
        .and_then(|certificates| certificates.collect::<Result<_, _>>())
        .map_err(|error| format!("reading {}: {error}", certificate.display()))?;
    if chain.is_empty() {
        return Err(format!("{} holds no certificate", certificate.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|error| format!("reading {}: {error}", key.display()))?;
    // The one crypto provider built in (ring).
    let mut config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|error| format!("the certificate and key do not make a TLS identity: {error}"))?;
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // Tests may unwrap: a panic is the failure report.
mod tests {
    //! Goal: verifiers are PostgreSQL's form, salted anew each time, and
    //! read back whole.
    use super::*;

    #[test]
    fn verifiers_round_trip_and_are_salted() {
        let first = scram_verifier("secret");
        let second = scram_verifier("secret");
        assert!(first.starts_with("SCRAM-SHA-256$4096:"), "{first}");
        assert_ne!(first, second, "a fresh salt each time");
        let Some(ScramSecret::Verifier {
            salt, iterations, ..
        }) = parse_verifier(&first)
        else {
            panic!("does not parse: {first}");
        };
        assert_eq!((salt.len(), iterations), (SALT_BYTES, SCRAM_ITERATIONS));
        assert!(parse_verifier("md5abc").is_none());
        assert!(parse_verifier("SCRAM-SHA-256$x:y$z").is_none());
    }
}
