//! Without a GPU (CI), asking for one is an error that names what is missing, and
//! `Device::auto()` falls back to the interpreter and says why. With a GPU, both succeed.
use tessera::runtime::{Device, INTERPRET_ENV};

#[test]
fn a_missing_gpu_is_an_error_not_a_panic() {
    match Device::cuda(0) {
        Ok(dev) => assert!(dev.is_cuda()),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains("libcuda") || msg.contains("CUDA device") || msg.contains("libnvrtc"),
                "{msg}"
            );
        }
    }
    let auto = Device::auto();
    if !auto.is_cuda() {
        assert!(
            auto.describe().starts_with("interpreter (CPU; no GPU: "),
            "{}",
            auto.describe()
        );
    }
}

#[test]
fn the_interpreter_can_be_forced() {
    // Read by Device::auto(); set for this process only.
    std::env::set_var(INTERPRET_ENV, "1");
    let dev = Device::auto();
    std::env::remove_var(INTERPRET_ENV);
    assert!(!dev.is_cuda());
    assert!(
        dev.describe().contains("TESSERA_INTERPRET"),
        "{}",
        dev.describe()
    );
}
