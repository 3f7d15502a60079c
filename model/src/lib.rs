//! Qwen3 from Hugging Face files.
pub mod cli {
    #[derive(clap::Args, Debug)]
    pub struct GenerateArgs {}
    pub fn run_generate(_args: GenerateArgs) -> Result<(), String> {
        Err("not implemented yet".into())
    }
}
