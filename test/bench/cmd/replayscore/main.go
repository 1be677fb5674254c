// Command replayscore scores migflex against the other real policies over
// many trace replays (every replay.json under the directories or files it
// is given, replays of the same pod list and seed merged): wins, ties and
// losses of served share at load 1 or more against the best other real
// policy, outside each point's noise band; the served GPU-time summed
// against each other real policy's; the eight-GPU pods against first
// fit's; the p99 wait below saturation against first fit's plus the
// change latency, churn and the fill. It writes markdown to stdout.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/migflex/migflex/test/bench/replay"
)

func run(args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("replayscore", flag.ContinueOnError)
	fl.SetOutput(stderr)
	sc := replay.DefaultScoring()
	fl.StringVar(&sc.Subject, "subject", sc.Subject, "the policy judged")
	fl.StringVar(&sc.Reference, "reference", sc.Reference, "the policy whose p99 wait (plus the change latency) the subject's is held to below saturation")
	fl.StringVar(&sc.Twin, "twin", sc.Twin, "the policy whose gap to the reference at a point is one measure of the replay's noise there")
	fl.Float64Var(&sc.Tie, "tie", sc.Tie, "the least noise band: served share within which the subject ties the best other real policy (0.0005: 0.05 points)")
	fl.StringVar(&sc.Band, "band", sc.Band, "each point's noise band: twins (the most the reference and the twin are apart at the pod list and load over the seeds), seeds (the reference's spread over the seeds there, or its gap to the twin at the point, whichever is larger), tie (-tie alone); at least -tie")
	against := fl.String("against", "", "comma-separated policies the subject is judged against (default: every other real policy)")
	jsonOut := fl.String("json", "", "also write the scoreboard as JSON to this file")
	svgOut := fl.String("svg", "", "also write the margin plot (served share minus the best other real policy's, against load) to this file")
	title := fl.String("title", "migflex against the best other real policy", "the margin plot's title")
	if err := fl.Parse(args); err != nil {
		return err
	}
	for _, p := range strings.Split(*against, ",") {
		if p = strings.TrimSpace(p); p != "" {
			sc.Against = append(sc.Against, p)
		}
	}
	if fl.NArg() == 0 {
		return errors.New("give replay.json files or directories holding them")
	}
	var reports []*replay.Report
	for _, root := range fl.Args() {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || filepath.Base(path) != "replay.json" && path != root {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			r := &replay.Report{}
			if err := json.Unmarshal(b, r); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			reports = append(reports, r)
			return nil
		})
		if err != nil {
			return err
		}
	}
	if len(reports) == 0 {
		return errors.New("no replay.json found")
	}
	b, err := sc.Score(reports)
	if err != nil {
		return err
	}
	if *jsonOut != "" {
		out, err := json.MarshalIndent(b, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, out, 0o644); err != nil {
			return err
		}
	}
	if *svgOut != "" {
		if err := os.WriteFile(*svgOut, []byte(b.MarginChart(*title)), 0o644); err != nil {
			return err
		}
	}
	return b.WriteMarkdown(stdout)
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "replayscore:", err)
		os.Exit(1)
	}
}
