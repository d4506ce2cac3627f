package config

import (
	"strings"
	"time"
)

// schema is the YAML file, section by section. The yaml tags are the keys;
// the decoder, Redacted and the test that keeps config.yaml complete all
// walk these types, so a key added here is a key everywhere. A field with
// the name and type of a field of the library Config it configures is
// copied to it by name (copyFields). Field types are limited to string,
// bool, int, time.Duration, []string, map[string]string and sections.
type (
	schema struct {
		Redis     redisSection     `yaml:"redis"`
		Ownership ownershipSection `yaml:"ownership"`
		Engine    engineSection    `yaml:"engine"`
		Target    targetSection    `yaml:"target"`
		Items     itemsSection     `yaml:"items"`
		Sink      sinkSection      `yaml:"sink"`
		HTTP      httpSection      `yaml:"http"`
		Log       logSection       `yaml:"log"`
	}
	redisSection struct {
		Addrs               []string      `yaml:"addrs"`
		MasterName          string        `yaml:"master_name"`
		Cluster             bool          `yaml:"cluster"`
		Username            string        `yaml:"username"`
		PasswordEnv         string        `yaml:"password_env"`
		PasswordFile        string        `yaml:"password_file"`
		SentinelPasswordEnv string        `yaml:"sentinel_password_env"`
		DB                  int           `yaml:"db"`
		TLS                 tlsSection    `yaml:"tls"`
		KeyPrefix           string        `yaml:"key_prefix"`
		Shards              int           `yaml:"shards"`
		RefuseEviction      bool          `yaml:"refuse_eviction"`
		RequirePersistence  bool          `yaml:"require_persistence"`
		DialTimeout         time.Duration `yaml:"dial_timeout"`
		ReadTimeout         time.Duration `yaml:"read_timeout"`
		WriteTimeout        time.Duration `yaml:"write_timeout"`
		PoolSize            int           `yaml:"pool_size"`
		// AutoPipeline is set to store.AutoPipelineDefault before the
		// file is decoded (Parse): unset keeps it.
		AutoPipeline bool `yaml:"auto_pipeline"`
	}
	tlsSection struct {
		Enabled            bool   `yaml:"enabled"`
		CAFile             string `yaml:"ca_file"`
		CertFile           string `yaml:"cert_file"`
		KeyFile            string `yaml:"key_file"`
		ServerName         string `yaml:"server_name"`
		InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
	}
	ownershipSection struct {
		TTL            time.Duration `yaml:"ttl"`
		Heartbeat      time.Duration `yaml:"heartbeat"`
		Settle         time.Duration `yaml:"settle"`
		Margin         time.Duration `yaml:"margin"`
		MinReplicas    int           `yaml:"min_replicas"`
		ReplicaTimeout time.Duration `yaml:"replica_timeout"`
		Owner          string        `yaml:"owner"`
	}
	engineSection struct {
		Workers       int           `yaml:"workers"`
		Interval      time.Duration `yaml:"interval"`
		Batch         int           `yaml:"batch"`
		MaxAttempts   int           `yaml:"max_attempts"`
		BackoffMin    time.Duration `yaml:"backoff_min"`
		BackoffMax    time.Duration `yaml:"backoff_max"`
		DrainTimeout  time.Duration `yaml:"drain_timeout"`
		Poll          time.Duration `yaml:"poll"`
		CountInterval time.Duration `yaml:"count_interval"`
		ClaimAhead    int           `yaml:"claim_ahead"`
	}
	// targetSection configures engine.TargetConfig; rate is parsed by
	// engine.ParseRate.
	targetSection struct {
		Rate        string         `yaml:"rate"`
		Burst       int            `yaml:"burst"`
		MaxInFlight int            `yaml:"max_in_flight"`
		Breaker     breakerSection `yaml:"breaker"`
	}
	breakerSection struct {
		Disabled      bool          `yaml:"disabled"`
		Failures      int           `yaml:"failures"`
		ProbeInterval time.Duration `yaml:"probe_interval"`
		Window        time.Duration `yaml:"window"`
	}
	itemsSection struct {
		IDs            []string      `yaml:"ids"`
		File           string        `yaml:"file"`
		Command        []string      `yaml:"command"`
		CommandTimeout time.Duration `yaml:"command_timeout"`
		Refresh        time.Duration `yaml:"refresh"`
		MaxRemoval     int           `yaml:"max_removal"`
	}
	sinkSection struct {
		Type string          `yaml:"type"`
		Exec execSinkSection `yaml:"exec"`
		HTTP httpSinkSection `yaml:"http"`
		File fileSinkSection `yaml:"file"`
		Log  logSinkSection  `yaml:"log"`
	}
	execSinkSection struct {
		Command []string      `yaml:"command"`
		Env     []string      `yaml:"env"`
		Dir     string        `yaml:"dir"`
		Timeout time.Duration `yaml:"timeout"`
		Grace   time.Duration `yaml:"grace"`
		// ExitCodes maps exit statuses to failure classes (sinks.ParseClass).
		ExitCodes map[string]string `yaml:"exit_codes"`
	}
	httpSinkSection struct {
		URL       string            `yaml:"url"`
		Headers   map[string]string `yaml:"headers"`
		Timeout   time.Duration     `yaml:"timeout"`
		Redirects string            `yaml:"redirects"`
	}
	fileSinkSection struct {
		Path string `yaml:"path"`
	}
	logSinkSection struct {
		Delay     time.Duration `yaml:"delay"`
		FailEvery int           `yaml:"fail_every"`
	}
	httpSection struct {
		Listen string `yaml:"listen"`
		// APITokenEnv and APITokenFile name where the API's bearer token is
		// (APIToken); with neither, the API is off.
		APITokenEnv  string `yaml:"api_token_env"`
		APITokenFile string `yaml:"api_token_file"`
		// AllowedHosts are the names a request's Host may give (File.AllowedHosts).
		AllowedHosts []string `yaml:"allowed_hosts"`
	}
	logSection struct {
		Level  string `yaml:"level"`
		Format string `yaml:"format"`
	}
)

// Sink types, the values of sink.type.
const (
	SinkLog  = "log"
	SinkExec = "exec"
	SinkHTTP = "http"
	SinkFile = "file"
)

// sinkTypes lists the sink types in the order messages name them.
var sinkTypes = []string{SinkLog, SinkExec, SinkHTTP, SinkFile}

// logLevelDefault is log.level when it is not set.
const logLevelDefault = "info"

// enum is a field that takes one of a few words.
type enum struct {
	words []string // in the order messages name them
	def   string   // the default, taken when the field is left out
}

// enums are the fields that take one of a few words.
var enums = map[string]enum{
	"sink.type":  {sinkTypes, SinkLog},
	"log.level":  {[]string{"debug", logLevelDefault, "warn", "error"}, logLevelDefault},
	"log.format": {[]string{FormatAuto, FormatJSON, FormatConsole}, FormatAuto},
}

// want says what the field e takes, for a message: "one of log (the
// default), exec, http or file". It names the default, so that a user
// who gave something else knows what leaving the key out means.
func (e enum) want() string {
	words := make([]string, len(e.words))
	for i, w := range e.words {
		words[i] = w
		if w == e.def {
			words[i] += " (the default)"
		}
	}
	last := len(words) - 1
	return "one of " + strings.Join(words[:last], ", ") + " or " + words[last]
}

// enumWants are the enums' wants by field, for the decoder's type errors
// ("sink.type: expected one of log (the default), ..., got a list").
func enumWants() map[string]string {
	m := make(map[string]string, len(enums))
	for field, e := range enums {
		m[field] = e.want()
	}
	return m
}

// Log formats, the values of log.format.
const (
	FormatAuto    = "auto"    // console on a terminal, JSON otherwise
	FormatJSON    = "json"    // one JSON object per line
	FormatConsole = "console" // zerolog's human-readable console writer
)
