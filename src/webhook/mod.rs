//! Webhooks: durable outbound notifications (`deliver`), signed per Standard Webhooks
//! (`common::signature`), and the SSRF guard for outbound deliveries (`ssrf`).

pub mod deliver;
pub mod ssrf;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::bus::Bus;
use crate::common::cidr::Cidr;
use crate::common::public_url::PublicUrl;
use crate::common::redact::display_url;
use crate::common::signature::Secret;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError};
use crate::supervise::Supervisor;
use deliver::Delivery;
use ssrf::Guard;

/// Why webhooks could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("{0}")]
    Config(String),
    #[error("cannot read the webhook endpoints: {0}")]
    Store(#[from] StoreError),
}

pub use deliver::DEFAULT_SCHEDULE;

/// The webhook flags, checked (`config::WebhookArgs::settings`).
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// `--webhook-url`s, as given.
    pub urls: Vec<String>,
    /// `--webhook-secret-file`s: `PATH` for every endpoint, or `URL=PATH` for one.
    pub secret_files: Vec<String>,
    pub inbound_secret_file: Option<PathBuf>,
    /// `--webhook-allow-cidr`s: networks the SSRF guard lets through.
    pub allow: Vec<Cidr>,
    /// Waits after the 1st, 2nd, … failed attempt; after the last, the event is a dead letter.
    pub schedule: Vec<Duration>,
    /// How long an endpoint's lease lasts without renewal.
    pub lease: Duration,
    /// `--webhook-reenable`s.
    pub reenable: Vec<String>,
    /// The base of answer links (default `http://<bind>`).
    pub public_url: Option<PublicUrl>,
}

/// Reads the inbound secret (`--inbound-secret-file`), which verifies signed answers, if any.
pub fn inbound_secret(settings: &WebhookSettings) -> Result<Option<Arc<Secret>>, WebhookError> {
    let Some(path) = &settings.inbound_secret_file else { return Ok(None) };
    let secret = Secret::from_file(path).map_err(|e| WebhookError::Config(format!("--inbound-secret-file: {e}")))?;
    Ok(Some(Arc::new(secret)))
}

/// Each `--webhook-url` with the secret that signs its requests: its own `URL=PATH`, else the
/// plain `PATH` given for all.
fn endpoint_secrets(settings: &WebhookSettings, urls: &[String]) -> Result<Vec<(String, Arc<Secret>)>, WebhookError> {
    let read = |path: &str| {
        Secret::from_file(path).map(Arc::new).map_err(|e| WebhookError::Config(format!("--webhook-secret-file: {e}")))
    };
    let (mut shared, mut own) = (None, std::collections::HashMap::new());
    for value in &settings.secret_files {
        // `URL=PATH` only for a URL given to --webhook-url (URLs may hold `=` themselves); the
        // longest such URL wins.
        let endpoint = urls
            .iter()
            .filter(|url| value.strip_prefix(url.as_str()).is_some_and(|rest| rest.starts_with('=')))
            .max_by_key(|url| url.len());
        match endpoint {
            Some(url) => {
                if own.insert(url.clone(), read(&value[url.len() + 1..])?).is_some() {
                    return Err(WebhookError::Config(format!("--webhook-secret-file names {url} twice")));
                }
            }
            None if shared.is_none() => shared = Some(read(value)?),
            None => {
                return Err(WebhookError::Config(
                    "--webhook-secret-file is given twice for every endpoint; give one PATH for all, and URL=PATH                      for an endpoint of its own (URL exactly as given to --webhook-url)"
                        .into(),
                ));
            }
        }
    }
    urls.iter()
        .map(|url| match own.remove(url).or_else(|| shared.clone()) {
            Some(secret) => Ok((url.clone(), secret)),
            None => Err(WebhookError::Config(format!(
                "--webhook-url {url} needs a secret to sign with: --webhook-secret-file PATH (for every endpoint) \
                 or --webhook-secret-file {url}=PATH"
            ))),
        })
        .collect()
}

/// Checks the endpoints and their secrets and starts one delivery task per enabled endpoint
/// under `supervisor`.
pub async fn start(
    settings: &WebhookSettings,
    address: SocketAddr,
    store: &Store,
    bus: &Arc<Bus>,
    metrics: &Arc<Metrics>,
    supervisor: &Supervisor,
    shutdown: CancellationToken,
) -> Result<(), WebhookError> {
    if settings.urls.is_empty() {
        if !settings.secret_files.is_empty() {
            tracing::warn!(
                "--webhook-secret-file without --webhook-url signs nothing (signed answers are verified with --inbound-secret-file)"
            );
        }
        return Ok(());
    }
    let public_url = match &settings.public_url {
        Some(url) => {
            let url = url.base();
            ssrf::check_url(url).map_err(|e| WebhookError::Config(format!("--public-url {url}: {e}")))?;
            url.to_owned()
        }
        // An unspecified address without --public-url never gets here: the fail-secure bind
        // (`auth::Security::check_exposure`) refused it on the address served.
        None => format!("http://{address}"),
    };
    let guard = Guard::new(settings.allow.clone());
    // One task per endpoint: a URL given twice must not get two tasks racing on one cursor.
    let mut urls = settings.urls.clone();
    urls.sort();
    urls.dedup();
    let mut secrets: std::collections::HashMap<String, Arc<Secret>> =
        endpoint_secrets(settings, &urls)?.into_iter().collect();
    for url in &urls {
        guard.check(url).map_err(|e| WebhookError::Config(format!("--webhook-url {url}: {e}")))?;
    }
    let http = ssrf::client(guard).map_err(|e| {
        WebhookError::Config(format!("cannot set up the webhook HTTP client (are CA certificates installed?): {e}"))
    })?;
    let endpoints = store.outbox().register(urls, settings.reenable.clone()).await?;
    let delivery = Delivery {
        store: store.clone(),
        bus: Arc::clone(bus),
        // Unique per process: a restarted replica is a new owner, and takes its leases over
        // once they run out.
        replica: format!("gatehouse-{}", uuid::Uuid::new_v4().simple()),
        lease: settings.lease,
        http,
        schedule: settings.schedule.clone(),
        public_url,
        key: Arc::clone(store.server_key()),
        metrics: Arc::clone(metrics),
        shutdown,
    };
    for endpoint in endpoints {
        if endpoint.disabled {
            tracing::warn!(url = %display_url(&endpoint.url), "webhook endpoint is disabled (it answered 410); --webhook-reenable to resume");
        } else {
            let secret = secrets.remove(&endpoint.url).expect("every registered endpoint has its secret");
            supervisor.spawn("webhook delivery", delivery.clone().run(endpoint.url, secret));
        }
    }
    Ok(())
}
