// compose-config renders a compose file the way `docker compose config` (Compose v2) does: it loads,
// validates against the compose specification, interpolates and normalizes with compose-go, the
// library `docker compose` itself loads files with. For machines without the Docker CLI plugin.
//
//	compose-config [-p PROFILE ...] FILE   (the project's .env and the environment are read as compose does)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
)

type profiles []string

func (p *profiles) String() string     { return strings.Join(*p, ",") }
func (p *profiles) Set(v string) error { *p = append(*p, v); return nil }

func main() {
	var active profiles
	flag.Var(&active, "p", "a profile to enable (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: compose-config [-p PROFILE ...] FILE")
		os.Exit(2)
	}
	opts, err := cli.NewProjectOptions([]string{flag.Arg(0)}, cli.WithOsEnv, cli.WithDotEnv,
		cli.WithProfiles(active), cli.WithName("otel-grpo"))
	if err == nil {
		var out []byte
		project, loadErr := cli.ProjectFromOptions(context.Background(), opts)
		if err = loadErr; err == nil {
			if out, err = project.MarshalYAML(); err == nil {
				_, err = os.Stdout.Write(out)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compose-config:", err)
		os.Exit(1)
	}
}
