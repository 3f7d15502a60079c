//! The engine thread and its bounded queue. The engine (GPU context, KV cache) is built
//! on, and never leaves, one thread; requests wait in a bounded channel and run one at a
//! time. Each request's tokens go back as [`Event`]s on its own channel: when the client
//! has gone (its receiver dropped), the next token's send fails and generation stops.
use super::log::{Log, RequestStats};
use super::text::TextStream;
use model::engine::Engine;
use model::generate::{generate, StopReason};
use model::sampling::{Sampler, SamplingParams};
use model::tokenizer::Tokenizer;
use model::ModelError;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// One request for the engine.
pub struct Job {
    /// For the log: "chatcmpl-7".
    pub id: String,
    pub prompt: Vec<u32>,
    pub max_tokens: usize,
    pub params: SamplingParams,
    pub stop: Vec<String>,
    pub events: UnboundedSender<Event>,
    pub queued_at: Instant,
}

/// Why a completion ended, in OpenAI's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// EOS or a stop string.
    Stop,
    /// `max_tokens` or the end of the context.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// New text, one event per decoded token that adds any (a token may add none: half
    /// a UTF-8 character, a special token, text held back while it may begin a stop string).
    Text(String),
    Done {
        finish: Finish,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    /// The engine failed; nothing more comes.
    Error(String),
}

/// What the HTTP side learns about the engine once it is built.
#[derive(Debug, Clone)]
pub struct EngineInfo {
    pub name: String,
    pub device: String,
    pub max_context: usize,
    pub vocab_size: usize,
}

/// The sending side of the queue; cloned into every handler.
#[derive(Clone)]
pub struct Queue {
    tx: SyncSender<Job>,
    waiting: Arc<AtomicUsize>,
    capacity: usize,
}

pub enum SubmitError {
    Full,
    Closed,
}

impl Queue {
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        // Counted before the send: the engine thread may take the job at once.
        self.waiting.fetch_add(1, Ordering::SeqCst);
        match self.tx.try_send(job) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                Err(match e {
                    TrySendError::Full(_) => SubmitError::Full,
                    TrySendError::Disconnected(_) => SubmitError::Closed,
                })
            }
        }
    }
    /// Requests waiting (not counting the one running).
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

pub struct Options {
    /// Places in the queue (requests waiting while one runs).
    pub capacity: usize,
    pub eos: Vec<u32>,
    pub log: Arc<Log>,
    /// Test hook: a pause after each generated token, so tests can watch a queue fill.
    pub step_delay: Duration,
}

/// Starts the engine thread: `build` runs on it; returns once the engine is ready. The
/// thread ends when every [`Queue`] is dropped and the queue is drained.
pub fn start<B>(
    build: B,
    tokenizer: Arc<Tokenizer>,
    opts: Options,
) -> Result<(Queue, EngineInfo, JoinHandle<()>), ModelError>
where
    B: FnOnce() -> Result<Box<dyn Engine>, ModelError> + Send + 'static,
{
    let capacity = opts.capacity;
    let (tx, rx) = sync_channel::<Job>(capacity);
    let waiting = Arc::new(AtomicUsize::new(0));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let w = waiting.clone();
    let handle = std::thread::Builder::new()
        .name("tessera-engine".into())
        .spawn(move || {
            let mut engine = match build() {
                Ok(e) => e,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let info = EngineInfo {
                name: engine.name().to_string(),
                device: engine.device(),
                max_context: engine.max_context(),
                vocab_size: engine.vocab_size(),
            };
            if ready_tx.send(Ok(info)).is_err() {
                return;
            }
            serve_jobs(engine.as_mut(), &rx, &w, &tokenizer, &opts);
        })
        .map_err(|e| ModelError::Usage(format!("cannot start the engine thread: {e}")))?;
    let info = match ready_rx.recv() {
        Ok(r) => r?,
        Err(_) => {
            return Err(ModelError::Usage(
                "the engine thread stopped while building the engine".into(),
            ))
        }
    };
    let queue = Queue {
        tx,
        waiting,
        capacity,
    };
    Ok((queue, info, handle))
}

fn serve_jobs(
    engine: &mut dyn Engine,
    rx: &Receiver<Job>,
    waiting: &AtomicUsize,
    tok: &Tokenizer,
    opts: &Options,
) {
    // Ends when every sender is gone and the queue is empty: the drain at shutdown.
    for job in rx.iter() {
        waiting.fetch_sub(1, Ordering::SeqCst);
        let queue_ms = job.queued_at.elapsed().as_secs_f64() * 1e3;
        if job.events.is_closed() {
            opts.log.line(&format!(
                "serve: {}: client left while queued ({queue_ms:.1} ms)",
                job.id
            ));
            continue;
        }
        // A panic in an engine must not take the server down: it fails this request.
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_job(engine, &job, tok, opts)
        }));
        let (mut stats, outcome) = match run {
            Ok(r) => r,
            Err(_) => {
                let _ = job.events.send(Event::Error(
                    "the engine panicked; see the server log".into(),
                ));
                (RequestStats::default(), "failed: engine panic".to_string())
            }
        };
        stats.queue_ms = queue_ms;
        opts.log.line(&stats.line(&job.id, &outcome));
    }
}

/// Runs one job; returns its stats and how it ended, for the log.
fn run_job(
    engine: &mut dyn Engine,
    job: &Job,
    tok: &Tokenizer,
    opts: &Options,
) -> (RequestStats, String) {
    let mut text = TextStream::new(tok, &job.stop);
    let mut sampler = Sampler::new(job.params.clone());
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = start;
    let mut count = 0usize;
    let mut stopped = false;
    let mut gone = false;
    let result = {
        let mut on_token = |id: u32| -> Result<(), ModelError> {
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            count += 1;
            let piece = text.push(id)?;
            let cancel = |why: &str| ModelError::Usage(why.into());
            if !piece.text.is_empty() && job.events.send(Event::Text(piece.text)).is_err() {
                gone = true;
                return Err(cancel("client disconnected"));
            }
            if job.events.is_closed() {
                gone = true;
                return Err(cancel("client disconnected"));
            }
            if piece.stopped {
                stopped = true;
                return Err(cancel("stop string"));
            }
            if !opts.step_delay.is_zero() {
                std::thread::sleep(opts.step_delay);
            }
            Ok(())
        };
        generate(
            engine,
            &job.prompt,
            job.max_tokens,
            &mut sampler,
            &opts.eos,
            &mut on_token,
        )
    };
    let decode_s = first.map_or(0.0, |f| (last - f).as_secs_f64());
    let stats = RequestStats {
        prompt_tokens: job.prompt.len(),
        completion_tokens: count,
        queue_ms: 0.0,
        ttft_ms: first.map_or(0.0, |f| (f - start).as_secs_f64() * 1e3),
        decode_tokens_per_s: if decode_s > 0.0 {
            (count - 1) as f64 / decode_s
        } else {
            0.0
        },
    };
    let finish = match result {
        _ if gone => return (stats, "cancelled: client disconnected".into()),
        _ if stopped => Finish::Stop,
        Ok(g) => match g.stop {
            StopReason::Eos => Finish::Stop,
            StopReason::MaxNewTokens | StopReason::ContextLimit => Finish::Length,
        },
        Err(e) => {
            let _ = job.events.send(Event::Error(e.to_string()));
            return (stats, format!("failed: {e}"));
        }
    };
    // What the detokenizer and the stop matcher still hold.
    let finish = match text.finish() {
        Ok(rest) => {
            if !rest.text.is_empty() {
                let _ = job.events.send(Event::Text(rest.text));
            }
            if rest.stopped {
                Finish::Stop
            } else {
                finish
            }
        }
        Err(e) => {
            let _ = job.events.send(Event::Error(e.to_string()));
            return (stats, format!("failed: {e}"));
        }
    };
    let _ = job.events.send(Event::Done {
        finish,
        prompt_tokens: job.prompt.len(),
        completion_tokens: count,
    });
    (stats, format!("finish {}", finish.as_str()))
}
