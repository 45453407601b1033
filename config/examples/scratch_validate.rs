fn main() {
    for f in std::env::args().skip(1) {
        let opts = courier_config::LoadOptions { config_path: Some(f.clone().into()), ..Default::default() };
        match courier_config::load_bootstrap(&opts) {
            Ok(_) => println!("{f}: OK"),
            Err(e) => { println!("{f}: ERR"); for x in e.errors { println!("   {}: {}", x.path, x.message); } }
        }
    }
}
