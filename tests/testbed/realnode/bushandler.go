package realnode

import (
	"reflect"

	"github.com/godbus/dbus/v5"
)

// busCall is one method call as a stand-in daemon sees it: the caller's
// unique name, the message (its serial, its flags) and the decoded
// arguments.
type busCall struct {
	sender string
	msg    *dbus.Message
	args   []any
}

// busMethod is a method of a stand-in daemon: the types of its arguments
// (as zero values) and its implementation, whose return values are the
// reply's body.
type busMethod struct {
	in   []any
	call func(c busCall) ([]any, *dbus.Error)
}

// busObject serves one object path of a stand-in daemon: methods by
// interface and member name. Unlike godbus's Export it hands the method
// the message itself (dbus.ArgumentDecoder gets a pointer to it), so that
// a method can send its own reply and act once the reply is written
// (the stand-in logind closes its copy of an inhibitor fd then, as logind
// does once sd_bus_reply_method_return has sent it).
type busObject struct {
	path    dbus.ObjectPath
	methods map[string]map[string]busMethod
}

func (o *busObject) LookupObject(path dbus.ObjectPath) (dbus.ServerObject, bool) {
	if path != o.path {
		return nil, false
	}
	return o, true
}

func (o *busObject) LookupInterface(name string) (dbus.Interface, bool) {
	ms, ok := o.methods[name]
	return busInterface(ms), ok
}

type busInterface map[string]busMethod

func (i busInterface) LookupMethod(name string) (dbus.Method, bool) {
	m, ok := i[name]
	return m, ok
}

func (m busMethod) DecodeArguments(_ *dbus.Conn, sender string, msg *dbus.Message, body []any) ([]any, error) {
	ptrs := make([]any, len(m.in))
	for i, a := range m.in {
		ptrs[i] = reflect.New(reflect.TypeOf(a)).Interface()
	}
	if len(body) != len(ptrs) {
		return nil, dbus.ErrMsgInvalidArg
	}
	if err := dbus.Store(body, ptrs...); err != nil {
		return nil, dbus.ErrMsgInvalidArg
	}
	args := make([]any, len(ptrs))
	for i, p := range ptrs {
		args[i] = reflect.ValueOf(p).Elem().Interface()
	}
	return []any{busCall{sender: sender, msg: msg, args: args}}, nil
}

func (m busMethod) Call(args ...any) ([]any, error) {
	ret, err := m.call(args[0].(busCall))
	if err != nil {
		return nil, err
	}
	return ret, nil
}

func (m busMethod) NumArguments() int       { return len(m.in) }
func (m busMethod) ArgumentValue(i int) any { return m.in[i] }
func (m busMethod) NumReturns() int         { return 0 }
func (m busMethod) ReturnValue(int) any     { return nil }

// reply sends the method return of c with body on conn now, and keeps
// godbus from sending another once the method returns (godbus sends none
// for a call flagged NoReplyExpected, handleCall in export.go).
func (c busCall) reply(conn *dbus.Conn, body ...any) error {
	wanted := c.msg.Flags&dbus.FlagNoReplyExpected == 0
	c.msg.Flags |= dbus.FlagNoReplyExpected
	if !wanted {
		return nil
	}
	msg := &dbus.Message{
		Type: dbus.TypeMethodReply,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldDestination: dbus.MakeVariant(c.sender),
			dbus.FieldReplySerial: dbus.MakeVariant(c.msg.Serial()),
		},
		Body: body,
	}
	if len(body) > 0 {
		msg.Headers[dbus.FieldSignature] = dbus.MakeVariant(dbus.SignatureOf(body...))
	}
	return conn.Send(msg, nil).Err
}
