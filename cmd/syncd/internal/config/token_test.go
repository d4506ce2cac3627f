package config

import (
	"strings"
	"testing"
)

func TestAPIToken(t *testing.T) {
	const secret = "s3cret-API-token-never-shown"
	tests := []struct {
		name    string
		http    string
		env     map[string]string
		files   map[string]string
		want    string
		wantErr string
	}{
		{"off", "", nil, nil, "", ""},
		{"from env", "api_token_env: TOK", map[string]string{"TOK": secret}, nil, secret, ""},
		{"from file", "api_token_file: /run/tok", nil, map[string]string{"/run/tok": secret + "\r\n"}, secret, ""},
		{"both", "api_token_env: TOK\n  api_token_file: /run/tok", map[string]string{"TOK": secret}, map[string]string{"/run/tok": secret},
			"", "c.yaml:4: http.api_token_file: only one of http.api_token_env and http.api_token_file may be set"},
		{"env unset", "api_token_env: TOK", nil, nil, "", "c.yaml:3: http.api_token_env: environment variable TOK is not set"},
		{"env empty", "api_token_env: TOK", map[string]string{"TOK": ""}, nil, "", "environment variable TOK is empty"},
		{"file missing", "api_token_file: /run/tok", nil, nil, "", "http.api_token_file: /run/tok: file does not exist"},
		{"file empty", "api_token_file: /run/tok", nil, map[string]string{"/run/tok": "\n"}, "", "/run/tok is empty"},
		{"short", "api_token_env: TOK", map[string]string{"TOK": "short-s3cret"}, nil, "", "12 bytes long, the shortest accepted is 16"},
		{"space", "api_token_env: TOK", map[string]string{"TOK": "s3cret token with spaces"}, nil, "", "white space"},
		{"newline inside", "api_token_file: /run/tok", nil, map[string]string{"/run/tok": secret + "\n" + secret + "\n"}, "", "at byte 28"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "http:\n  listen: 127.0.0.1:0\n"
			if tt.http != "" {
				src += "  " + tt.http + "\n"
			}
			f, err := Parse("c.yaml", []byte(src))
			if err != nil {
				// Both keys set: validation refuses the file already.
				if tt.wantErr == "" || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatal(err)
				}
				return
			}
			got, err := f.APIToken(fakeEnv(tt.env), fakeFiles(tt.files))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("APIToken: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("APIToken error %v, want one with %q", err, tt.wantErr)
			case err != nil && strings.Contains(err.Error(), "s3cret"):
				t.Errorf("the error quotes the token: %v", err)
			}
			if got != tt.want {
				t.Errorf("APIToken = %q, want %q", got, tt.want)
			}
		})
	}
}
