package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// newFlagSet returns an empty flag set for command name that prints nothing
// itself: parseFlags turns its errors into one line.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("baton "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseFlags parses args into fs and then fills every flag that the command
// line left unset from its environment variable (see envName). When ok is
// false the command must return code: help was asked for and printed
// (exitOK), or a usage error was printed (exitUsage).
func parseFlags(s *sys, c *command, fs *flag.FlagSet, args []string) (code int, ok bool) {
	explainDurations(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printCommandHelp(s.stdout, c)
			return exitOK, false
		}
		return usageError(s, c.name, err.Error()), false
	}
	if err := applyEnv(fs, s.lookupEnv); err != nil {
		return usageError(s, c.name, err.Error()), false
	}
	return exitOK, true
}

// envName is the environment variable of flag name: BATON_ and the name in
// upper case with - as _ (io-timeout: BATON_IO_TIMEOUT).
func envName(flagName string) string {
	return "BATON_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets each flag of fs that was not set on the command line from
// its environment variable, if that exists (even empty). The command line
// therefore wins. A value the flag refuses is an error naming the variable.
func applyEnv(fs *flag.FlagSet, lookupEnv func(string) (string, bool)) error {
	onCommandLine := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || onCommandLine[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := lookupEnv(name)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("invalid value %q for environment variable %s (flag -%s): %v", v, name, f.Name, e)
		}
	})
	return err
}

// printFlags lists the flags of fs with their defaults and variables.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%s %s\n        %s (default %s, $%s)\n", f.Name, typ, usage, def, envName(f.Name))
	})
}

// choiceValue is a string flag that takes one of a fixed set of words, in
// any case; it keeps the lower-case form.
type choiceValue struct {
	p       *string
	choices []string
}

func newChoiceValue(p *string, def string, choices ...string) *choiceValue {
	*p = def
	return &choiceValue{p: p, choices: choices}
}

func (v *choiceValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return *v.p
}

func (v *choiceValue) Set(s string) error {
	l := strings.ToLower(s)
	if !slices.Contains(v.choices, l) {
		return fmt.Errorf("must be one of %s", strings.Join(v.choices, ", "))
	}
	*v.p = l
	return nil
}

// modeDuration is a duration flag whose default depends on the mode the
// other flags choose: unset, value reports the given default.
type modeDuration struct {
	d   time.Duration
	set bool
}

func (v *modeDuration) String() string {
	if v == nil || !v.set {
		return ""
	}
	return v.d.String()
}

func (v *modeDuration) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	v.d, v.set = d, true
	return nil
}

// value is the flag's duration, or def when it was not set.
func (v *modeDuration) value(def time.Duration) time.Duration {
	if v.set {
		return v.d
	}
	return def
}

// parseDuration is time.ParseDuration with a refusal that says what to
// write instead: a bare number is the most common slip ("-lease 10"), and
// the flag package's own "parse error" does not say which unit is missing.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, nerr := strconv.ParseFloat(strings.TrimSpace(s), 64); nerr == nil {
		n := strings.TrimSpace(s)
		return 0, fmt.Errorf("add a unit: %ss (or %sms, %sm)", n, n, n)
	}
	return 0, errors.New("not a duration: write a number and a unit, such as 500ms, 10s, 5m or 1h30m")
}

// durationFlag is a duration flag whose refusals come from parseDuration.
type durationFlag struct{ flag.Value }

func (v durationFlag) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	return v.Value.Set(d.String())
}

// explainDurations makes every duration flag of fs (those of
// flag.DurationVar) refuse a value in parseDuration's words. Only the flag
// sets that parse are changed: help, made from fresh sets, still names the
// flags' type "duration".
func explainDurations(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDuration := g.Get().(time.Duration); isDuration {
				f.Value = durationFlag{f.Value}
			}
		}
	})
}
