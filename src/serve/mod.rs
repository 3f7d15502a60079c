//! `tessera serve`: an OpenAI-compatible HTTP endpoint over one decoder engine.
//!
//! Data flows one way: [`routes`] takes a request, [`request`] checks it into prompt ids
//! and parameters, [`queue`] runs it on the engine thread (batch 1), [`text`] turns its
//! tokens into text (stop strings), and [`response`] shapes the OpenAI objects that
//! [`routes`] sends back, whole or as server-sent events.
pub mod error;
pub mod log;
pub mod queue;
pub mod request;
pub mod response;
pub mod routes;
pub mod text;

use crate::cli::engine_args::{build_engine, load_model, EngineArgs};
use model::ModelError;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Checkpoint directory in the Hugging Face layout (needs tokenizer.json). Without it,
    /// the embedded random-weight Qwen3 with a byte tokenizer.
    #[arg(long, value_name = "DIR")]
    pub model: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port, printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// The model's name in the API. Default: the checkpoint directory's name.
    #[arg(long, value_name = "NAME")]
    pub served_model_name: Option<String>,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Requests that may wait while one runs; beyond them the server answers 503.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub queue_size: usize,
    /// Append the per-request lines (prompt tokens, time to first token, tokens/s) to FILE
    /// instead of stderr.
    #[arg(long, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Test hook: sleep this long after each generated token.
    #[arg(long, default_value_t = 0, hide = true)]
    pub step_delay_ms: u64,
}

/// The name used when no `--model` is given.
pub const EMBEDDED_NAME: &str = "tessera-embedded-random";

pub fn run(a: ServeArgs) -> Result<(), ModelError> {
    a.engine.check()?;
    if a.queue_size == 0 {
        return Err(ModelError::Usage("--queue-size must be at least 1".into()));
    }
    let log = Arc::new(
        log::Log::open(a.log.as_deref()).map_err(|e| ModelError::Usage(format!("--log: {e}")))?,
    );
    let m = load_model(a.model.as_deref(), std::io::stderr().is_terminal())?;
    let id = match (&a.served_model_name, &a.model) {
        (Some(n), _) => n.clone(),
        (None, Some(dir)) => dir
            .canonicalize()
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| dir.display().to_string()),
        (None, None) => EMBEDDED_NAME.to_string(),
    };
    let tokenizer = m.tokenizer.ok_or_else(|| {
        ModelError::Usage(format!(
            "serve needs a tokenizer: {} has no tokenizer.json",
            a.model
                .as_deref()
                .unwrap_or(std::path::Path::new("?"))
                .display()
        ))
    })?;
    if m.chat_template.is_none() && !m.embedded {
        eprintln!(
            "note: no chat template in the checkpoint: chat messages are joined as plain text"
        );
    }
    let tokenizer = Arc::new(tokenizer);
    let (cfg, weights, engine_args) = (m.cfg, m.weights, a.engine.clone());
    let opts = queue::Options {
        capacity: a.queue_size,
        eos: m.eos,
        log,
        step_delay: Duration::from_millis(a.step_delay_ms),
    };
    // Sampling is per request, so engines must return logits (or sample on the device).
    let (queue, info, engine_thread) = queue::start(
        move || build_engine(&engine_args, cfg, weights, false),
        tokenizer.clone(),
        opts,
    )?;
    let served = request::Served {
        id,
        tokenizer,
        template: m.chat_template,
        embedded: m.embedded,
        max_context: info.max_context,
        vocab_size: info.vocab_size,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| ModelError::Usage(format!("cannot start the async runtime: {e}")))?;
    let result = rt.block_on(listen(&a, served, info, queue));
    // Every sender is gone with the router: the engine thread drains the queue and ends.
    let _ = engine_thread.join();
    eprintln!("tessera serve: stopped");
    result
}

async fn listen(
    a: &ServeArgs,
    served: request::Served,
    info: queue::EngineInfo,
    queue: queue::Queue,
) -> Result<(), ModelError> {
    let addr = format!("{}:{}", a.host, a.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| ModelError::Usage(format!("cannot listen on {addr}: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| ModelError::Usage(format!("cannot listen on {addr}: {e}")))?;
    eprintln!(
        "tessera serve: model {} | engine {} on {} | context {} tokens | queue {} | listening on http://{local}",
        served.id, info.name, info.device, info.max_context, queue.capacity()
    );
    let state = Arc::new(routes::AppState {
        served,
        info,
        queue,
        next_id: AtomicU64::new(0),
        started: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    });
    axum::serve(listener, routes::router(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(|e| ModelError::Usage(format!("server: {e}")))
}

/// Ctrl-C or SIGTERM: stop accepting, let the requests in flight and queued finish. A
/// second Ctrl-C exits at once.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    eprintln!(
        "tessera serve: shutting down: finishing the requests in flight (Ctrl-C again to stop now)"
    );
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("tessera serve: stopped without draining");
            std::process::exit(130);
        }
    });
}
