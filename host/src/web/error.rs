//! How a request to `dsh web`'s API fails: a status and a message, sent as `{"error"}`; the
//! session service's errors mapped to their statuses.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::service::ServiceError;
use dsh_session::lock::{Busy, LockError};

/// A failed request: its status and what it says.
pub struct ApiError(StatusCode, String);

impl ApiError {
    pub fn new(status: StatusCode, message: String) -> ApiError {
        ApiError(status, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(json!({"error": self.1}))).into_response()
    }
}

impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> ApiError {
        let status = match &error {
            ServiceError::NotFound(_) | ServiceError::Unknown(_) => StatusCode::NOT_FOUND,
            ServiceError::AlreadyOpen(_) => StatusCode::CONFLICT,
            ServiceError::Invalid(_) => StatusCode::BAD_REQUEST,
            ServiceError::Config { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            ServiceError::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
            ServiceError::Failed(err) if is_busy(err) => StatusCode::CONFLICT,
            ServiceError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, error.to_string())
    }
}

fn is_busy(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.is::<Busy>() || matches!(cause.downcast_ref::<LockError>(), Some(LockError::Busy(_))))
}

/// A failure of the server itself (500).
pub fn internal(error: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
}
