//! Command-line options: Envoy's flags, with Envoy's meanings.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// What the process does with its configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Load the configuration and serve traffic.
    Serve,
    /// Check the configuration (and every file it references), print the result and exit.
    Validate,
}

/// Log verbosity, named as Envoy names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Everything.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Problems worth a look.
    #[value(alias = "warning")]
    Warn,
    /// Failures.
    Error,
    /// Only the worst (mapped to error).
    Critical,
    /// Nothing.
    Off,
}

impl LogLevel {
    /// The `tracing` filter directive for this level.
    pub fn directive(self) -> &'static str {
        match self {
            LogLevel::Trace => "trace",
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error | LogLevel::Critical => "error",
            LogLevel::Off => "off",
        }
    }
}

/// courier: an Envoy-compatible L7 proxy. Takes Envoy's flags and Envoy's v3 bootstrap.
#[derive(Debug, Clone, Parser)]
#[command(name = "courier", version, about, long_about = None)]
pub struct Cli {
    /// Path to a v3 bootstrap file (.yaml, .yml or .json).
    #[arg(short = 'c', long = "config-path", value_name = "FILE")]
    pub config_path: Option<PathBuf>,

    /// A v3 bootstrap in YAML, merged over the file (scalars replace, messages merge, lists append).
    #[arg(long = "config-yaml", value_name = "YAML")]
    pub config_yaml: Option<String>,

    /// serve (default) or validate.
    #[arg(long, value_enum, default_value_t = Mode::Serve)]
    pub mode: Mode,

    /// Number of worker threads (default: the number of available cores).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub concurrency: Option<u32>,

    /// Log level: trace, debug, info, warning, error, critical, off.
    #[arg(short = 'l', long = "log-level", value_enum, default_value_t = LogLevel::Info)]
    pub log_level: LogLevel,

    /// Overrides node.id of the bootstrap.
    #[arg(long = "service-node", value_name = "ID")]
    pub service_node: Option<String>,

    /// Overrides node.cluster of the bootstrap.
    #[arg(long = "service-cluster", value_name = "NAME")]
    pub service_cluster: Option<String>,

    /// Overrides node.locality.zone of the bootstrap.
    #[arg(long = "service-zone", value_name = "ZONE")]
    pub service_zone: Option<String>,

    /// Once admin listens, write its address (`host:port`) to this file, as Envoy does.
    #[arg(long = "admin-address-path", value_name = "FILE")]
    pub admin_address_path: Option<PathBuf>,

    /// The format of courier's own log lines (spdlog flags, as Envoy's;
    /// default `[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] %v`). Not together with
    /// the bootstrap's `application_log_config.log_format`.
    #[arg(long = "log-format", value_name = "FORMAT")]
    pub log_format: Option<String>,

    /// C-escape log messages so each is one line.
    #[arg(long = "log-format-escaped")]
    pub log_format_escaped: bool,

    /// Append log lines to this file instead of writing them to stderr.
    #[arg(long = "log-path", value_name = "FILE")]
    pub log_path: Option<PathBuf>,

    /// Levels of single components, `<component>:<level>,...` with Envoy's
    /// component names (`upstream:debug,connection:trace`).
    #[arg(long = "component-log-level", value_name = "LEVELS")]
    pub component_log_level: Option<String>,

    /// Seconds that listeners drain for on shutdown or removal.
    #[arg(long = "drain-time-s", value_name = "SECONDS", default_value_t = 600)]
    pub drain_time_s: u64,
}

impl Cli {
    /// The `tracing` filter these flags ask for: `--log-level`, with the
    /// components `--component-log-level` names at their own levels.
    pub fn log_filter(&self) -> Result<String, String> {
        let mut levels = Vec::new();
        for item in self
            .component_log_level
            .iter()
            .flat_map(|s| s.split(','))
            .filter(|s| !s.is_empty())
        {
            let Some((component, level)) = item.split_once(':') else {
                return Err(format!(
                    "component log level not correctly specified '{item}'"
                ));
            };
            let level = LogLevel::from_str(level, true)
                .map_err(|_| format!("invalid log level specified '{level}'"))?;
            levels.push((component.to_string(), level.directive().to_string()));
        }
        courier::app_log::component::filter(self.log_level.directive(), &levels)
    }

    /// The config loader's view of these flags.
    pub fn load_options(&self) -> courier_config::LoadOptions {
        courier_config::LoadOptions {
            config_path: self.config_path.clone(),
            config_yaml: self.config_yaml.clone(),
            service_node: self.service_node.clone(),
            service_cluster: self.service_cluster.clone(),
            service_zone: self.service_zone.clone(),
        }
    }

    /// The data plane's view of these flags.
    pub fn serve_options(&self) -> courier::ServeOptions {
        courier::ServeOptions {
            workers: self.workers(),
            drain_time: std::time::Duration::from_secs(self.drain_time_s),
            admin_address_path: self.admin_address_path.clone(),
            bootstrap_dump: None,
            log_control: None,
        }
    }

    /// The worker count: `--concurrency`, else the cores available to this process.
    pub fn workers(&self) -> usize {
        self.concurrency
            .map(|n| n as usize)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}
