//! Webhooks (spec §9): durable outbound notifications (`deliver`), Standard Webhooks signatures
//! (`sign`, also for signed inbound answers) and the SSRF guard for outbound deliveries (`ssrf`).

pub mod deliver;
pub mod sign;
pub mod ssrf;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::ServeArgs;
use crate::store::{Store, StoreError};
use sign::Secret;
use ssrf::{Cidr, Guard};

/// Why webhooks could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("{0}")]
    Config(String),
    #[error("cannot read the webhook endpoints: {0}")]
    Store(#[from] StoreError),
}

/// Reads the secret, checks the endpoints and starts one delivery task per enabled endpoint, in
/// `deliveries` (so that shutdown can wait for the requests in flight). Returns the secret, which
/// also verifies signed answers.
pub async fn start(
    args: &ServeArgs,
    address: SocketAddr,
    store: &Store,
    shutdown: CancellationToken,
    deliveries: &mut tokio::task::JoinSet<()>,
) -> Result<Option<Arc<Secret>>, WebhookError> {
    let secret = match &args.webhook_secret_file {
        None => None,
        Some(path) => Some(Arc::new(Secret::from_file(path).map_err(|e| WebhookError::Config(e.to_string()))?)),
    };
    if args.webhook_urls.is_empty() {
        return Ok(secret);
    }
    let Some(secret) = secret else {
        return Err(WebhookError::Config("--webhook-url needs --webhook-secret-file to sign with".into()));
    };
    let public_url = match &args.public_url {
        Some(url) => {
            ssrf::check_url(url).map_err(|e| WebhookError::Config(format!("--public-url {url}: {e}")))?;
            url.trim_end_matches('/').to_owned()
        }
        None if address.ip().is_unspecified() => {
            return Err(WebhookError::Config(format!(
                "answer links need --public-url when binding the unspecified address {address}"
            )));
        }
        None => format!("http://{address}"),
    };
    let allow = args
        .webhook_allow_cidrs
        .iter()
        .map(|c| c.parse::<Cidr>().map_err(|e| WebhookError::Config(format!("--webhook-allow-cidr {c}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    let guard = Guard::new(allow);
    // One task per endpoint: a URL given twice must not get two tasks racing on one cursor.
    let mut urls = args.webhook_urls.clone();
    urls.sort();
    urls.dedup();
    for url in &urls {
        guard.check(url).map_err(|e| WebhookError::Config(format!("--webhook-url {url}: {e}")))?;
    }
    let http = ssrf::client(guard).map_err(|e| {
        WebhookError::Config(format!("cannot set up the webhook HTTP client (are CA certificates installed?): {e}"))
    })?;
    let endpoints = store.webhook_register(urls, args.webhook_reenable.clone()).await?;
    let delivery = deliver::Delivery {
        store: store.clone(),
        http,
        secret: Arc::clone(&secret),
        schedule: if args.webhook_retry_schedule.is_empty() {
            deliver::DEFAULT_SCHEDULE.to_vec()
        } else {
            args.webhook_retry_schedule.clone()
        },
        public_url,
        link_key: Arc::clone(store.link_key()),
        shutdown,
    };
    for endpoint in endpoints {
        if endpoint.disabled {
            tracing::warn!(url = %endpoint.url, "webhook endpoint is disabled (it answered 410); --webhook-reenable to resume");
        } else {
            deliveries.spawn(delivery.clone().run(endpoint.url));
        }
    }
    Ok(Some(secret))
}
