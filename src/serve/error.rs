//! OpenAI-style error objects: `{"error": {"message", "type", "param", "code"}}` with the
//! HTTP status that goes with them.
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: invalid_request_error, not_found_error, server_error...
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds, sent as `Retry-After` (503 queue full).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// 400: the request is wrong; `param` names the field at fault.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code: None,
            retry_after: None,
        }
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    /// 404 for a model this server does not serve (OpenAI's `model_not_found`).
    pub fn model_not_found(asked: &str, served: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!(
                "The model `{asked}` does not exist; this server serves `{served}` (GET /v1/models)"
            ),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
            retry_after: None,
        }
    }

    /// 404 for a path this server does not have.
    pub fn no_route(method: &str, path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("Unknown request URL: {method} {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("unknown_url"),
            retry_after: None,
        }
    }

    /// 405 for a known path with another method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!("{method} is not allowed on {path}"),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
            retry_after: None,
        }
    }

    /// 503 with `Retry-After`: every place in the queue is taken.
    pub fn queue_full(capacity: usize) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "The server is busy: {capacity} requests are already waiting; retry later"
            ),
            kind: "server_error",
            param: None,
            code: Some("queue_full"),
            retry_after: Some(1),
        }
    }

    /// 503: the server is shutting down (or its engine stopped).
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("unavailable"),
            retry_after: Some(1),
        }
    }

    /// 500: the engine failed while generating.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// The body, also sent as an SSE event when a stream fails midway.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(s));
        }
        r
    }
}
