//! Compiles ONNX's protobuf schema (`proto/onnx.proto`, vendored from the `onnx` package; see
//! `proto/README.md`) into Rust types with prost, using the protoc binary that
//! `protoc-bin-vendored` ships, so that no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc);
    config.compile_protos(&["proto/onnx.proto"], &["proto"])?;
    Ok(())
}
