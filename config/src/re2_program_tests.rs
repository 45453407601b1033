use super::program_size;

#[test]
fn print_sizes() {
    if let Ok(list) = std::env::var("RE2_SIZES") {
        for line in std::fs::read_to_string(list).unwrap().lines() {
            println!("SIZE\t{:?}\t{line}", program_size(line));
        }
    }
}
