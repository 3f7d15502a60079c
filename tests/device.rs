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

/// `upload_concat`: the parts one after the other, each element intact (bf16 and i32
/// through their bytes); `upload` is its one-part case.
fn check_upload_concat(dev: &Device) {
    use tessera::runtime::bf16;
    let a: Vec<bf16> = (0..5).map(|i| bf16::from_f32(i as f32 - 1.5)).collect();
    let b: Vec<bf16> = (0..3).map(|i| bf16::from_f32(100.0 + i as f32)).collect();
    let buf = dev.upload_concat(&[&a, &[], &b]).unwrap();
    assert_eq!(buf.len(), 8);
    assert_eq!(buf.to_vec().unwrap(), [a.clone(), b].concat());
    let ints = dev.upload(&[7i32, -1, i32::MAX]).unwrap();
    assert_eq!(ints.to_vec().unwrap(), [7, -1, i32::MAX]);
}

#[test]
fn upload_concat_stacks_its_parts_in_order() {
    check_upload_concat(&Device::interpreter());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_upload_concat_stacks_its_parts_in_order() {
    check_upload_concat(&Device::cuda(0).expect("a CUDA GPU"));
}
