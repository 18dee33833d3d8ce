// Package typednil tells a nil interface value, or one holding a nil
// pointer, map, slice, channel or function, from a usable one: a typed nil
// passes a v != nil check and then panics when a method reads through it.
package typednil

import "reflect"

// Is reports whether v is nil or an interface holding a nil pointer, map,
// slice, channel, function or unsafe pointer.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
