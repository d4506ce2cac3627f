//go:build syncd_autopipeline

package store

// Built with -tags syncd_autopipeline, every store auto-pipelines, so
// the existing suites (tests/fault, tests/topology, ...) run with
// Config.AutoPipeline on without each of them setting it.
func init() { forceAutoPipeline = true }
