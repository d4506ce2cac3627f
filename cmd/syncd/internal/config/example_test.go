package config_test

import (
	"fmt"
	"strings"

	"github.com/syncd/syncd/cmd/syncd/internal/config"
)

// Every problem in a file is reported at once, each with its line and the
// dotted key.
func ExampleParse() {
	const src = `
redis:
  shardz: 8
ownership:
  ttl: 3x
engine:
  workers: -1
sink:
  type: exec
`
	_, err := config.Parse("config.yaml", []byte(src[1:]))
	fmt.Println(err)
	// Output:
	// config.yaml:2: redis.shardz: unknown key (did you mean shards?)
	// config.yaml:4: ownership.ttl: "3x" is not a duration (examples: 30s, 500ms, 2m)
	// config.yaml:6: engine.workers: -1 is outside 1..10000
	// config.yaml:8: sink.exec.command: required when sink.type is exec
}

func ExampleFile_Redacted() {
	const src = `
sink:
  type: http
  http:
    url: https://user:pa55@hooks.example.com/sync?sig=abc
    headers:
      Authorization: Bearer abc123
      User-Agent: syncd
      X-Team: billing
`
	f, err := config.Parse("config.yaml", []byte(src))
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := f.Redacted()
	// Print the sink section only: the rest is every default.
	_, sink, _ := strings.Cut(string(out), "\nsink:\n")
	sink, _, _ = strings.Cut(sink, "\nhttp:\n")
	fmt.Print(sink)
	// Output:
	//   type: http
	//   http:
	//     url: https://xxxxx@hooks.example.com/sync?sig=xxxxx
	//     headers:
	//       Authorization: '[redacted]'
	//       User-Agent: syncd
	//       X-Team: '[redacted]'
	//     timeout: 30s
	//     redirects: same-origin
}
