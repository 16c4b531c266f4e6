//! The `flushpoint` command-line tool.
fn main() {
    println!("flushpoint {}", env!("CARGO_PKG_VERSION"));
}
