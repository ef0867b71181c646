package topology

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ParseYAML reads a flat YAML mapping of Config keys (JSON is YAML too).
// name labels the errors. Unknown keys (with the closest known name),
// repeated keys, nested values and wrong types are errors.
func ParseYAML(name string, data []byte) (*Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &Config{}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return c, nil // an empty file
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: line %d: want a mapping of keys to values (key: value per line)", name, root.Line)
	}
	seen := map[string]int{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		f, ok := lookupField(k.Value)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: line %d: %w", name, k.Line, unknownKey(k.Value)))
			continue
		}
		if line, dup := seen[f.Key]; dup {
			errs = append(errs, fmt.Errorf("%s: line %d: %s is already set on line %d", name, k.Line, k.Value, line))
			continue
		}
		seen[f.Key] = k.Line
		if v.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Errorf("%s: line %d: %s: want a single value, not a list or mapping", name, v.Line, k.Value))
			continue
		}
		if v.Tag == "!!null" {
			continue
		}
		val, err := ParseValue(f, v.Value)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: line %d: %s: %w", name, v.Line, k.Value, err))
			continue
		}
		if err := c.Set(f.Key, val); err != nil {
			errs = append(errs, fmt.Errorf("%s: line %d: %w", name, v.Line, err))
		}
	}
	return c, errors.Join(errs...)
}

// ParseValue converts a flag's or a YAML scalar's text to the field's
// kind.
func ParseValue(f Field, s string) (any, error) {
	switch f.Kind {
	case reflect.Int:
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("want an integer, got %q", s)
		}
		return n, nil
	case reflect.Bool:
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true", "yes", "on", "1":
			return true, nil
		case "false", "no", "off", "0":
			return false, nil
		}
		return nil, fmt.Errorf("want true or false, got %q", s)
	}
	return s, nil
}
