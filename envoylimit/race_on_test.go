//go:build race

package envoylimit_test

// raceEnabled: the tests run with -race, and so does the server program
// they build.
const raceEnabled = true
