//! Primitives several parts share, each depending on nothing else of the crate: IP networks
//! (`cidr`), Standard Webhooks signatures for outbound deliveries and signed inbound answers
//! (`signature`), retry timing (`backoff`), and how errors and URLs are shown to people (here
//! and in `redact`). Features depend on this module, never the other way round.

pub mod backoff;
pub mod cidr;
pub mod public_url;
pub mod redact;
pub mod signature;

/// The innermost cause of an error ("Connection refused"), which says more to a person than the
/// outer layers of a client library's error.
pub fn innermost_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut source = e;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}
