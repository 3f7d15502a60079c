//! A checkpoint directory in the Hugging Face layout, loaded as a whole.
use crate::chat::ChatTemplate;
use crate::config::Config;
use crate::error::ModelError;
use crate::tokenizer::Tokenizer;
use crate::weights::Weights;
use std::path::Path;

pub struct Checkpoint {
    pub config: Config,
    pub weights: Weights,
    /// None without `tokenizer.json` (then only `--prompt-ids` works).
    pub tokenizer: Option<Tokenizer>,
    pub chat_template: Option<ChatTemplate>,
    /// Things the user should know (conversions, ignored tensors).
    pub notes: Vec<String>,
}

impl Checkpoint {
    pub fn load(dir: &Path, progress: bool) -> Result<Checkpoint, ModelError> {
        if !dir.is_dir() {
            return Err(ModelError::io(
                dir,
                std::io::Error::new(std::io::ErrorKind::NotFound, "not a checkpoint directory"),
            ));
        }
        let config = Config::from_dir(dir)?;
        let (weights, notes) = Weights::load(dir, &config, progress)?;
        let tok_path = dir.join("tokenizer.json");
        let tokenizer = if tok_path.exists() {
            Some(Tokenizer::from_file(&tok_path)?)
        } else {
            None
        };
        let chat_template = ChatTemplate::from_dir(dir)?;
        Ok(Checkpoint {
            config,
            weights,
            tokenizer,
            chat_template,
            notes,
        })
    }
}
