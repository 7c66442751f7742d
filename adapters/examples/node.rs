//! One overlay node over TCP: `cargo run -p p2pmp-adapters --features app --example node -- --help`.

fn main() -> std::process::ExitCode {
    p2pmp_adapters::app::main()
}
