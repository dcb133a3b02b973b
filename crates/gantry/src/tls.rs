//! TLS for every listener: the server certificate (the operator's `--tls-cert`/`--tls-key`, or
//! one signed by a private CA generated into `<data-dir>/tls/`), the rustls configurations of
//! HTTPS and the broker, their reload on SIGHUP, and the HTTPS listener.
//!
//! Every configuration resolves the certificate through one [`ReloadingCert`], so a reload
//! reaches new connections of HTTPS, MQTT/TLS and MQTT/WSS alike.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::config::ServeConfig;
use crate::tasks::{Stage, Tasks};

/// ring: the provider rmqtt-net's TLS uses too, so the build has one crypto stack.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate and what to build TLS configurations from.
pub struct Tls {
    cert: Arc<ReloadingCert>,
    client_ca: Option<Vec<CertificateDer<'static>>>,
    /// `<data-dir>/tls/ca.pem` when the certificate is the generated one.
    pub generated_ca: Option<PathBuf>,
}

impl Tls {
    /// Loads `--tls-cert`/`--tls-key`, or generates (first start) or reuses the private CA and
    /// its server certificate, and reads `--mqtt-client-ca`.
    pub fn prepare(config: &ServeConfig, names: &[String]) -> anyhow::Result<Self> {
        let (cert, key, generated_ca) = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => (cert.clone(), key.clone(), None),
            (None, None) => {
                let dir = config.data_dir.join("tls");
                let ca = generate::ensure(&dir, names)?;
                (dir.join("server.pem"), dir.join("server.key"), Some(ca))
            }
            _ => bail!("--tls-cert and --tls-key go together: give both or neither"),
        };
        let client_ca = match &config.mqtt_client_ca {
            Some(path) => Some(read_certs(path).context("reading --mqtt-client-ca")?),
            None => None,
        };
        Ok(Self {
            cert: Arc::new(ReloadingCert::load(cert, key)?),
            client_ca,
            generated_ca,
        })
    }

    /// For HTTPS and MQTT over WSS: no client certificates asked for.
    pub fn server_config(&self, alpn: &[&[u8]]) -> anyhow::Result<Arc<ServerConfig>> {
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.cert.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }

    /// For MQTT over TLS: with `--mqtt-client-ca`, a client may present a certificate, which
    /// must then chain to that CA (the handshake fails otherwise); a client without one goes on
    /// to log in with its password.
    pub fn mqtts_config(&self) -> anyhow::Result<Arc<ServerConfig>> {
        let Some(roots) = &self.client_ca else {
            return self.server_config(&[]);
        };
        let mut store = rustls::RootCertStore::empty();
        for root in roots {
            store
                .add(root.clone())
                .context("adding a --mqtt-client-ca certificate")?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(store.into(), provider())
            .allow_unauthenticated()
            .build()
            .context("building the client certificate verifier")?;
        let config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(self.cert.clone());
        Ok(Arc::new(config))
    }

    /// Whether client certificates are asked for on MQTT over TLS.
    pub fn client_certs(&self) -> bool {
        self.client_ca.is_some()
    }

    pub fn cert_path(&self) -> &Path {
        &self.cert.cert
    }

    /// Reads the certificate and key files again on every SIGHUP, as a task of `tasks` until
    /// the listeners stop; new connections get the new certificate, open ones keep theirs. A
    /// failed reload keeps the old certificate.
    pub(crate) fn reload_on_sighup(&self, tasks: &Tasks) -> anyhow::Result<()> {
        let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .context("installing the SIGHUP handler")?;
        let cert = self.cert.clone();
        tasks.spawn_until(Stage::Http, async move {
            while hup.recv().await.is_some() {
                match cert.reload() {
                    Ok(()) => tracing::info!(cert = %cert.cert.display(), "TLS certificate reloaded"),
                    Err(e) => tracing::error!(
                        error = format!("{e:#}"),
                        "TLS certificate not reloaded; keeping the old one"
                    ),
                }
            }
        });
        Ok(())
    }
}

/// The server certificate, read from its files and replaceable while listeners run.
#[derive(Debug)]
pub struct ReloadingCert {
    cert: PathBuf,
    key: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
}

impl ReloadingCert {
    fn load(cert: PathBuf, key: PathBuf) -> anyhow::Result<Self> {
        let current = RwLock::new(certified_key(&cert, &key)?);
        Ok(Self { cert, key, current })
    }

    pub fn reload(&self) -> anyhow::Result<()> {
        let fresh = certified_key(&self.cert, &self.key)?;
        *self.current.write().expect("certificate lock") = fresh;
        Ok(())
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.read().expect("certificate lock").clone())
    }
}

fn certified_key(cert: &Path, key: &Path) -> anyhow::Result<Arc<CertifiedKey>> {
    let chain = read_certs(cert)?;
    let key_der =
        PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading the private key {}", key.display()))?;
    let certified = CertifiedKey::from_der(chain, key_der, &provider())
        .with_context(|| format!("{} does not match the key {}", cert.display(), key.display()))?;
    Ok(Arc::new(certified))
}

fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .with_context(|| format!("reading {}", path.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", path.display()))?;
    if certs.is_empty() {
        bail!("{} holds no PEM certificate", path.display());
    }
    Ok(certs)
}

/// HTTPS for `axum::serve`: TLS handshakes run in their own tasks (a slow client does not hold
/// up the others) and finished connections are handed over in order of completion.
pub struct HttpsListener {
    local_addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    acceptor: JoinHandle<()>,
}

impl HttpsListener {
    /// Accepts on `listener` in a task of `tasks` until the listeners stop (or this is dropped).
    pub(crate) fn new(listener: TcpListener, config: Arc<ServerConfig>, tasks: &Tasks) -> std::io::Result<Self> {
        let local_addr = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let tls = TlsAcceptor::from(config);
        let handshakes = tasks.token(Stage::Http);
        let tracker = tasks.tracker(Stage::Http).clone();
        let acceptor = tasks.spawn_until(Stage::Http, async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "HTTPS accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (tls, tx) = (tls.clone(), tx.clone());
                let stopped = handshakes.clone();
                tracker.spawn(async move {
                    let handshake = tokio::time::timeout(Duration::from_secs(10), tls.accept(tcp));
                    let handshake = tokio::select! {
                        done = handshake => done,
                        _ = stopped.cancelled() => return,
                    };
                    match handshake {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "HTTPS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "HTTPS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            local_addr,
            ready,
            acceptor,
        })
    }
}

impl Drop for HttpsListener {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

impl axum::serve::Listener for HttpsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The acceptor loop never ends while the listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

/// The private CA and the server certificate it signs, in `<data-dir>/tls/`.
mod generate {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    use std::path::{Path, PathBuf};

    use anyhow::Context;
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    use time::{Duration, OffsetDateTime};

    /// Renew the server certificate at start when it has fewer days left than this.
    const RENEW_DAYS: i64 = 30;
    /// 825 days: the longest validity Apple's platforms accept for a TLS server certificate.
    const SERVER_DAYS: i64 = 825;
    const CA_DAYS: i64 = 3650;

    /// Makes sure `dir` holds the CA and a server certificate for `names`; returns `ca.pem`'s path.
    /// The CA is made once and kept (devices trust it); the server certificate is reissued by
    /// that CA when it is missing, near its expiry, or lacks one of `names`.
    pub fn ensure(dir: &Path, names: &[String]) -> anyhow::Result<PathBuf> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", dir.display()))?;
        let (ca_pem, ca_key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
        let ca_key = if ca_pem.exists() && ca_key_path.exists() {
            let pem =
                std::fs::read_to_string(&ca_key_path).with_context(|| format!("reading {}", ca_key_path.display()))?;
            KeyPair::from_pem(&pem).with_context(|| format!("parsing {}", ca_key_path.display()))?
        } else {
            let key = KeyPair::generate()?;
            let cert = ca_params()?.self_signed(&key)?;
            write(&ca_key_path, &key.serialize_pem(), 0o600)?;
            write(&ca_pem, &cert.pem(), 0o644)?;
            // A new CA: whatever server certificate was here was signed by another.
            let _ = std::fs::remove_file(dir.join("server.pem"));
            key
        };
        let server_pem = dir.join("server.pem");
        if !still_good(&server_pem, names) {
            let issuer = Issuer::new(ca_params()?, ca_key);
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(names.to_vec())?;
            params.distinguished_name = name("Gantry server");
            params.not_before = OffsetDateTime::now_utc() - Duration::hours(1);
            params.not_after = OffsetDateTime::now_utc() + Duration::days(SERVER_DAYS);
            params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
            let cert = params.signed_by(&key, &issuer)?;
            write(&dir.join("server.key"), &key.serialize_pem(), 0o600)?;
            write(&server_pem, &cert.pem(), 0o644)?;
            tracing::info!(names = ?names, cert = %server_pem.display(), "issued the server certificate");
        }
        Ok(ca_pem)
    }

    /// The CA's parameters: its key and these make the issuer, so it can sign again at any start.
    fn ca_params() -> anyhow::Result<CertificateParams> {
        let mut params = CertificateParams::new(Vec::new())?;
        params.distinguished_name = name("Gantry private CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        params.not_before = OffsetDateTime::now_utc() - Duration::hours(1);
        params.not_after = OffsetDateTime::now_utc() + Duration::days(CA_DAYS);
        Ok(params)
    }

    fn name(common_name: &str) -> DistinguishedName {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "Gantry");
        dn.push(DnType::CommonName, common_name);
        dn
    }

    /// Whether the server certificate exists, has more than RENEW_DAYS left and names all of `names`.
    fn still_good(path: &Path, names: &[String]) -> bool {
        use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
        let Ok(pem) = std::fs::read(path) else { return false };
        let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(&pem) else {
            return false;
        };
        let Ok((_, cert)) = X509Certificate::from_der(&pem.contents) else {
            return false;
        };
        let renew_at = OffsetDateTime::now_utc() + Duration::days(RENEW_DAYS);
        if cert.validity().not_after.timestamp() < renew_at.unix_timestamp() {
            return false;
        }
        let held: Vec<String> = match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some(d.to_string()),
                    GeneralName::IPAddress(b) => ip(b).map(|a| a.to_string()),
                    _ => None,
                })
                .collect(),
            _ => return false,
        };
        names.iter().all(|n| held.iter().any(|h| h.eq_ignore_ascii_case(n)))
    }

    fn ip(bytes: &[u8]) -> Option<std::net::IpAddr> {
        match bytes.len() {
            4 => Some(<[u8; 4]>::try_from(bytes).ok()?.into()),
            16 => Some(<[u8; 16]>::try_from(bytes).ok()?.into()),
            _ => None,
        }
    }

    fn write(path: &Path, contents: &str, mode: u32) -> anyhow::Result<()> {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(path)
            .with_context(|| format!("writing {}", path.display()))?;
        file.write_all(contents.as_bytes())?;
        // `mode` applies to a new file only; an existing one is brought to it too.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        Ok(())
    }
}
