//! TLS on every listener: devices over MQTT/TLS and WSS trusting the generated CA, HTTPS with
//! the same certificate, device certificates instead of passwords, TLS routes, and a
//! certificate replaced on SIGHUP.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gantry::config::Listen;
use gantry::device::DeviceClient;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rumqttc::{MqttOptions, TlsConfiguration, Transport};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};

use crate::helpers::{TestApp, UNBOUND, spawn_app, spawn_app_with, spawn_with, wait_for};

const PREFIX: &str = "gantry";

/// A rustls client trusting the PEM certificates in `ca`, presenting `identity` when given.
fn client_config(ca: &Path, identity: Option<&DeviceCert>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(gantry::tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    Arc::new(match identity {
        Some(id) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(id.cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(id.key.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    })
}

fn mqtts_options(client_id: &str, addr: SocketAddr, tls: Arc<rustls::ClientConfig>) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, "localhost", addr.port());
    options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(tls)));
    options
}

fn with_token(mut options: MqttOptions, id: &str, token: &str) -> MqttOptions {
    options.set_credentials(id, token);
    options
}

fn ids(device: &Value) -> (&str, &str) {
    (device["id"].as_str().unwrap(), device["accessToken"].as_str().unwrap())
}

/// Publishes a temperature and waits for it to show in the device shadow over REST.
async fn publish_and_find(app: &TestApp, client: &mut DeviceClient, device: &str, value: f64) {
    client
        .publish_attrs(&[("temp", json!(value))], None, false)
        .await
        .expect("the broker acknowledges the message");
    let found = wait_for(Duration::from_secs(5), async || {
        let shadow = app
            .get(format!("/api/v1/devices/{device}/shadows"), &app.admin)
            .await
            .result();
        shadow["attributeMap"]["temp"]["value"] == json!(value)
    })
    .await;
    assert!(found, "the event published over TLS is stored");
}

/// The leaf certificate a TLS listener presents to a client trusting `ca`.
async fn presented(addr: SocketAddr, ca: &Path) -> Vec<u8> {
    let connector = tokio_rustls::TlsConnector::from(client_config(ca, None));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("the handshake succeeds trusting the CA");
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn pem_der(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path).unwrap().to_vec()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
async fn devices_log_in_over_tls_and_wss_trusting_the_generated_ca() {
    let app = spawn_app().await;
    let tls_dir = app.data_dir.join("tls");
    let ca = app.tls_ca.clone().expect("a CA is generated without --tls-cert");
    assert_eq!(ca, tls_dir.join("ca.pem"));
    assert_eq!(mode(&tls_dir), 0o700);
    for key in ["server.key", "ca.key"] {
        assert_eq!(mode(&tls_dir.join(key)), 0o600, "{key}");
    }
    let world = app.world().await;
    let (id, token) = ids(&world.device);

    let tls = client_config(&ca, None);
    let mut device = DeviceClient::connect_options(
        with_token(mqtts_options(id, app.mqtts.unwrap(), tls.clone()), id, token),
        PREFIX,
    )
    .await
    .expect("the device logs in over MQTT/TLS");
    publish_and_find(&app, &mut device, id, 21.5).await;
    device.disconnect().await;

    let wrong = DeviceClient::connect_options(
        with_token(mqtts_options(id, app.mqtts.unwrap(), tls.clone()), id, "not-the-token"),
        PREFIX,
    )
    .await;
    assert!(wrong.is_err(), "TLS does not replace the password");

    let wss = app.mqtt_wss.unwrap();
    let mut options = MqttOptions::new(id, format!("wss://localhost:{}/mqtt", wss.port()), wss.port());
    options.set_transport(Transport::wss_with_config(TlsConfiguration::Rustls(tls.clone())));
    let mut device = DeviceClient::connect_options(with_token(options, id, token), PREFIX)
        .await
        .expect("the device logs in over MQTT/WSS");
    publish_and_find(&app, &mut device, id, 22.5).await;
    device.disconnect().await;

    // HTTPS: a real client trusting only ca.pem, and the very certificate the broker shows.
    let https = app.https.unwrap();
    let client = reqwest::Client::builder()
        .use_preconfigured_tls((*client_config(&ca, None)).clone())
        .build()
        .unwrap();
    let health = client
        .get(format!("https://127.0.0.1:{}/healthz", https.port()))
        .send()
        .await
        .expect("HTTPS answers");
    assert_eq!(health.status(), 200);
    let devices = client
        .get(format!("https://localhost:{}/api/v1/devices/{id}", https.port()))
        .bearer_auth(&app.admin)
        .send()
        .await
        .unwrap();
    assert_eq!(devices.status(), 200);
    let server = pem_der(&tls_dir.join("server.pem"));
    assert_eq!(presented(https, &ca).await, server);
    assert_eq!(presented(app.mqtts.unwrap(), &ca).await, server);
    assert_eq!(presented(wss, &ca).await, server);
    app.stop().await;
}

#[tokio::test]
async fn the_generated_certificate_is_reused_after_a_restart() {
    let app = spawn_app().await;
    let admin = app.admin.clone();
    let world = app.world().await;
    let (id, token) = (ids(&world.device).0.to_owned(), ids(&world.device).1.to_owned());
    let database_url = app.database_url();
    let tls_dir = app.data_dir.join("tls");
    let before: Vec<Vec<u8>> = ["ca.pem", "server.pem", "server.key"]
        .iter()
        .map(|f| std::fs::read(tls_dir.join(f)).unwrap())
        .collect();
    let dir = app.stop_keep_data().await.unwrap();

    let mut config = gantry::config::ServeConfig::local(dir.path().to_path_buf());
    config.admin_token = Some(admin.clone());
    config.database_url = Some(database_url);
    let again = spawn_with(config, dir, admin).await;
    let after: Vec<Vec<u8>> = ["ca.pem", "server.pem", "server.key"]
        .iter()
        .map(|f| std::fs::read(tls_dir.join(f)).unwrap())
        .collect();
    assert_eq!(before, after, "the CA and the server certificate are kept");
    DeviceClient::connect_options(
        with_token(
            mqtts_options(&id, again.mqtts.unwrap(), client_config(&tls_dir.join("ca.pem"), None)),
            &id,
            &token,
        ),
        PREFIX,
    )
    .await
    .expect("a device trusting the first ca.pem still logs in")
    .disconnect()
    .await;
    again.stop().await;
}

/// A CA for device certificates, and the certificates it signs.
struct DeviceCa {
    params: CertificateParams,
    key: KeyPair,
    pem: String,
}

struct DeviceCert {
    cert: String,
    key: String,
}

impl DeviceCa {
    fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Self { params, key, pem }
    }

    fn issue(&self, common_name: &str) -> DeviceCert {
        let mut params = CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, common_name);
        let key = KeyPair::generate().unwrap();
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        DeviceCert {
            cert: cert.pem(),
            key: key.serialize_pem(),
        }
    }

    fn write(&self, dir: &Path) -> PathBuf {
        let path = dir.join("device-ca.pem");
        std::fs::write(&path, &self.pem).unwrap();
        path
    }
}

#[tokio::test]
async fn a_device_certificate_replaces_the_password() {
    let files = tempfile::tempdir().unwrap();
    let devices_ca = DeviceCa::new("Fleet devices");
    let ca_path = devices_ca.write(files.path());
    let app = spawn_app_with(|c| c.mqtt_client_ca = Some(ca_path)).await;
    let server_ca = app.tls_ca.clone().unwrap();
    let world = app.world().await;
    let (id, token) = ids(&world.device);
    let other = app.create_device(&app.admin, &world.project, &world.model).await;
    let mqtts = app.mqtts.unwrap();
    let login = |client_id: &str, cert: Option<&DeviceCert>| {
        DeviceClient::connect_options(mqtts_options(client_id, mqtts, client_config(&server_ca, cert)), PREFIX)
    };

    let own = devices_ca.issue(id);
    let mut device = login(id, Some(&own))
        .await
        .expect("a certificate naming the device logs it in without a password");
    publish_and_find(&app, &mut device, id, 30.5).await;
    assert!(
        !device
            .subscribe(&format!("{PREFIX}/out/json/{}", other["id"].as_str().unwrap()))
            .await
            .unwrap(),
        "the device is held to its own topics"
    );
    device.disconnect().await;

    let err = login(other["id"].as_str().unwrap(), Some(&own)).await.err();
    assert!(err.is_some(), "a certificate naming another device grants nothing");

    let stranger = DeviceCa::new("Someone else").issue(id);
    let err = login(id, Some(&stranger)).await.err();
    assert!(err.is_some(), "a certificate of another CA is refused");

    assert!(
        login(id, None).await.is_err(),
        "without certificate a password is needed"
    );
    DeviceClient::connect_options(
        with_token(mqtts_options(id, mqtts, client_config(&server_ca, None)), id, token),
        PREFIX,
    )
    .await
    .expect("a device without certificate still logs in with its token")
    .disconnect()
    .await;
    let plain = DeviceClient::connect(app.mqtt, PREFIX, id, "").await;
    assert!(plain.is_err(), "plain MQTT carries no certificate");

    app.put(format!("/api/v1/devices/{id}"), &app.admin, json!({"status": "Locked"}))
        .await
        .result();
    assert!(login(id, Some(&own)).await.is_err(), "a Locked device is refused");
    app.delete(format!("/api/v1/devices/{}", other["id"].as_str().unwrap()), &app.admin)
        .await
        .result_done();
    let gone = devices_ca.issue(other["id"].as_str().unwrap());
    assert!(
        login(other["id"].as_str().unwrap(), Some(&gone)).await.is_err(),
        "a deleted device is refused"
    );
    app.stop().await;
}

#[tokio::test]
async fn routes_hand_out_the_tls_ports_with_route_tls() {
    let plain = spawn_app().await;
    let world = plain.world().await;
    let web = route(&plain, &world, "WEB").await;
    assert_eq!(
        (web["port"].clone(), web["sslEnable"].clone()),
        (json!(plain.mqtt_ws.port()), json!(false)),
        "off by default with the generated certificate"
    );
    plain.stop().await;

    let app = spawn_app_with(|c| c.route_tls = Some(true)).await;
    let world = app.world().await;
    let web = route(&app, &world, "WEB").await;
    assert_eq!(
        (web["port"].clone(), web["sslEnable"].clone()),
        (json!(app.mqtt_wss.unwrap().port()), json!(true))
    );
    let app_role = route(&app, &world, "APP").await;
    assert_eq!(
        (app_role["port"].clone(), app_role["sslEnable"].clone()),
        (json!(app.mqtts.unwrap().port()), json!(true))
    );
    let tls = client_config(app.tls_ca.as_ref().unwrap(), None);
    let client_id = app_role["clientId"].as_str().unwrap();
    let mut options = mqtts_options(client_id, app.mqtts.unwrap(), tls);
    options.set_credentials(
        app_role["username"].as_str().unwrap(),
        app_role["password"].as_str().unwrap(),
    );
    DeviceClient::connect_options(options, PREFIX)
        .await
        .expect("the APP identity logs in on the port it was given")
        .disconnect()
        .await;
    app.stop().await;

    // --route-tls never falls back to a plain port: without WSS, WEB routes are refused.
    let app = spawn_app_with(|c| {
        c.route_tls = Some(true);
        c.mqtt_wss_addr = Listen(None);
    })
    .await;
    let world = app.world().await;
    let device = world.device["id"].as_str().unwrap();
    let before = app
        .get(format!("/api/v1/devices/{device}/routes"), &app.admin)
        .await
        .result()["total"]
        .clone();
    let refused = app
        .post(
            format!("/api/v1/devices/{device}/routes"),
            &app.admin,
            json!({"sourceType": "WEB"}),
        )
        .await
        .error(400);
    assert!(refused.contains("sourceType") && refused.contains("WEB"), "{refused}");
    let after = app
        .get(format!("/api/v1/devices/{device}/routes"), &app.admin)
        .await
        .result()["total"]
        .clone();
    assert_eq!(before, after, "a refused route is not stored");
    let app_role = route(&app, &world, "APP").await;
    assert_eq!(
        (app_role["port"].clone(), app_role["sslEnable"].clone()),
        (json!(app.mqtts.unwrap().port()), json!(true))
    );
    app.stop().await;
}

/// With every plain listener `off`, the server runs on its TLS twins alone: the plain ports are
/// not bound, projects and routes advertise the TLS addresses, and devices log in over TLS.
#[tokio::test]
async fn a_server_with_the_plain_listeners_off_serves_over_tls_alone() {
    let app = spawn_app_with(|c| {
        c.http_addr = Listen(None);
        c.mqtt_addr = Listen(None);
        c.mqtt_ws_addr = Listen(None);
    })
    .await;
    assert_eq!(
        (app.mqtt, app.mqtt_ws),
        (UNBOUND, UNBOUND),
        "no plain MQTT listener is bound"
    );
    let (https, mqtts, wss) = (app.https.unwrap(), app.mqtts.unwrap(), app.mqtt_wss.unwrap());
    assert!(app.base.starts_with("https://"), "{}", app.base);

    // REST over HTTPS (the helpers' client trusts ca.pem alone).
    let world = app.world().await;
    assert_eq!(
        world.project["restfulApiAddr"],
        json!(format!("https://127.0.0.1:{}", https.port()))
    );
    assert_eq!(
        world.project["mqApiAddr"],
        json!(format!("mqtts://127.0.0.1:{}", mqtts.port()))
    );
    for (source, port) in [("APP", mqtts.port()), ("WEB", wss.port())] {
        let role = route(&app, &world, source).await;
        assert_eq!(
            (role["port"].clone(), role["sslEnable"].clone()),
            (json!(port), json!(true)),
            "{source} routes get the TLS listener"
        );
    }

    // A device over MQTT/TLS; its event reaches the shadow read over HTTPS.
    let (id, token) = ids(&world.device);
    let tls = client_config(app.tls_ca.as_ref().unwrap(), None);
    let mut device = DeviceClient::connect_options(with_token(mqtts_options(id, mqtts, tls), id, token), PREFIX)
        .await
        .expect("the device logs in over MQTT/TLS");
    publish_and_find(&app, &mut device, id, 31.5).await;
    device.disconnect().await;
    app.stop().await;
}

/// With neither listener for a kind of route, that kind is refused rather than advertising a
/// port nobody serves; the other kinds go on.
#[tokio::test]
async fn a_route_without_a_listener_is_refused() {
    let app = spawn_app_with(|c| {
        c.mqtt_ws_addr = Listen(None);
        c.mqtt_wss_addr = Listen(None);
    })
    .await;
    let world = app.world().await;
    let refused = app
        .post(
            format!("/api/v1/devices/{}/routes", world.device["id"].as_str().unwrap()),
            &app.admin,
            json!({"sourceType": "WEB"}),
        )
        .await
        .error(400);
    assert!(refused.contains("sourceType"), "{refused}");
    let app_role = route(&app, &world, "APP").await;
    assert_eq!(
        (app_role["port"].clone(), app_role["sslEnable"].clone()),
        (json!(app.mqtt.port()), json!(false))
    );
    app.stop().await;
}

async fn route(app: &TestApp, world: &crate::helpers::World, source: &str) -> Value {
    app.post(
        format!("/api/v1/devices/{}/routes", world.device["id"].as_str().unwrap()),
        &app.admin,
        json!({"sourceType": source}),
    )
    .await
    .result()["temporaryRole"]
        .clone()
}

/// A server certificate for `localhost` signed by `ca`, written to `dir`.
fn operator_cert(ca: &DeviceCa, dir: &Path) -> (PathBuf, PathBuf, Vec<u8>) {
    let params = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = params
        .signed_by(&key, &Issuer::from_params(&ca.params, &ca.key))
        .unwrap();
    let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path, cert.der().to_vec())
}

#[tokio::test]
async fn an_operator_certificate_is_served_and_reloaded_on_sighup() {
    let files = tempfile::tempdir().unwrap();
    let ca = DeviceCa::new("Operator CA");
    let ca_path = files.path().join("operator-ca.pem");
    std::fs::write(&ca_path, &ca.pem).unwrap();
    let (cert, key, first) = operator_cert(&ca, files.path());
    let app = spawn_app_with(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
    })
    .await;
    assert!(app.tls_ca.is_none(), "no CA is generated with --tls-cert");
    assert!(!app.data_dir.join("tls").exists());
    let (https, mqtts) = (app.https.unwrap(), app.mqtts.unwrap());
    assert_eq!(presented(https, &ca_path).await, first);
    assert_eq!(presented(mqtts, &ca_path).await, first);

    let world = app.world().await;
    let web = route(&app, &world, "WEB").await;
    assert_eq!(web["sslEnable"], true, "on by default with --tls-cert");

    let (_, _, second) = operator_cert(&ca, files.path());
    assert_ne!(first, second);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let reloaded = wait_for(Duration::from_secs(5), async || {
        presented(https, &ca_path).await == second
    })
    .await;
    assert!(reloaded, "new HTTPS connections get the new certificate");
    assert_eq!(presented(mqtts, &ca_path).await, second, "and so do new MQTT/TLS ones");
    app.stop().await;
}

#[tokio::test]
async fn tls_listeners_can_be_turned_off() {
    let app = spawn_app_with(|c| {
        c.mqtts_addr = Listen(None);
        c.mqtt_wss_addr = Listen(None);
        c.https_addr = Listen(None);
    })
    .await;
    assert_eq!((app.mqtts, app.mqtt_wss, app.https), (None, None, None));
    assert!(app.tls_ca.is_none());
    assert!(
        !app.data_dir.join("tls").exists(),
        "no certificate is made for no listener"
    );
    let world = app.world().await;
    let (id, token) = ids(&world.device);
    DeviceClient::connect(app.mqtt, PREFIX, id, token)
        .await
        .expect("plain MQTT still works")
        .disconnect()
        .await;
    app.stop().await;
}
