//! Compiles the vendored protobuf schemas (see `proto/README.md`) into Rust, using the protoc
//! binary that `protoc-bin-vendored` ships, so that no system protoc is needed: ONNX's model
//! format with prost, and the Open Inference Protocol's gRPC service (KServe v2, with Triton's
//! configuration and statistics RPCs) with tonic (server and client).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/onnx.proto");
    println!("cargo:rerun-if-changed=proto/grpc_service.proto");
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(&protoc);
    config.compile_protos(&["proto/onnx.proto"], &["proto"])?;
    let mut config = prost_build::Config::new();
    config.protoc_executable(&protoc);
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .generate_default_stubs(true)
        .compile_with_config(config, &["proto/grpc_service.proto"], &["proto"])?;
    Ok(())
}
