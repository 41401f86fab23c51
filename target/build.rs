//! Generates the management API's gRPC server and client from its .proto (protoc,
//! from the PROTOC variable or PATH; scripts/setup installs Debian's).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    const PROTO: &str = "proto/nvmf/target/v1/management.proto";
    println!("cargo:rerun-if-changed={PROTO}");
    tonic_prost_build::configure().compile_protos(&[PROTO], &["proto"])?;
    Ok(())
}
