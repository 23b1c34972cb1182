//! The store's errors: why it could not open, and why an operation failed. Callers map them
//! (the HTTP layer to 503 or 500); the store knows nothing of its callers.

/// Why the store could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Locked(String),
    #[error("{0}")]
    Database(String),
}

/// A failed storage operation.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// Busy, read-only, full, unreachable or failing storage, or the writer has stopped:
    /// retryable (503). After a failed COMMIT the outcome is unknown.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A broken invariant or damaged data: a bug (500).
    #[error("storage invariant broken: {0}")]
    Internal(String),
}

/// A storage operation's result (`StoreError` unless another error is named).
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
