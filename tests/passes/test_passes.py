"""Each pass on a small module: the IR before, the pipeline, the IR after (MLIR-style).

The expected texts were written and checked by hand against each pass's contract.
"""
from __future__ import annotations

import os

import pytest

from dslc.ir import parse, print_module, verify
from dslc.ir.passes import DEFAULT_PIPELINE, PassManager

CASES = []


def case(title, passes, before, after):
    CASES.append(pytest.param(before, passes, after, id=title))


case('fuse-nets: a load after a store of the blob uses the stored value', "fuse-nets", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = Const {value = dense<i64: 2>} : i64
      store @"x"(%a)
      %x = load @"x" : i64
      %b = Add(%x, %x) : i64
      store @"y"(%b)
      %x2 = load @"x" : i64
      store @"z"(%x2)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = Const {value = dense<i64: 2>} : i64
      %b = Add(%a, %a) : i64
      store @"x"(%a)
      store @"y"(%b)
      store @"z"(%a)
    }
  }
}
""")

case('dce: an FCGradient whose dX nothing needs stops computing it; one whose dX is used keeps it', "dce", """
module {
  group body {
    task @"t" {outputs = [@"w1", @"w2"]} body {
      %x = load @"x" : f32[4,3]
      %w = load @"w" : f32[5,3]
      %dy = load @"dy" : f32[4,5]
      %dw, %db, %dx = FCGradient(%x, %w, %dy) : f32[5,3], f32[5], f32[4,3]
      store @"w1"(%dw)
      store @"x_grad"(%dx)
      %dw2, %db2, %dx2 = FCGradient(%x, %w, %dy) : f32[5,3], f32[5], f32[4,3]
      %s = Sum(%dx2, %x) : f32[4,3]
      store @"w2"(%s)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"w1", @"w2"]} body {
      %x = load @"x" : f32[4,3]
      %w = load @"w" : f32[5,3]
      %dy = load @"dy" : f32[4,5]
      %dw, %db = FCGradient(%x, %w, %dy) : f32[5,3], f32[5]
      store @"w1"(%dw)
      %dw2, %db2, %dx2 = FCGradient(%x, %w, %dy) : f32[5,3], f32[5], f32[4,3]
      %s = Sum(%dx2, %x) : f32[4,3]
      store @"w2"(%s)
    }
  }
}
""")

case('dce: a kept store of a dX nothing else uses becomes a defer (the blob gets its value when read); '
     'one of a blob the module reads stays', "dce", """
module {
  group body {
    task @"t" {workspace = "global"} body {
      %x = load @"x" : f32[4,3]
      %w = load @"w" : f32[5,3]
      %dy = load @"dy" : f32[4,5]
      %dw, %db, %dx = FCGradient(%x, %w, %dy) : f32[5,3], f32[5], f32[4,3]
      store @"w_grad"(%dw)
      store @"x_grad"(%dx)
      %dw2, %db2, %dx2 = FCGradient(%x, %w, %dy) : f32[5,3], f32[5], f32[4,3]
      store @"y_grad"(%dx2)
      %l = load @"y_grad" : f32[4,3]
      store @"z"(%l)
    }
  }
}
""", """
module {
  group body {
    task @"t" {workspace = "global"} body {
      %x = load @"x" : f32[4,3]
      %w = load @"w" : f32[5,3]
      %dy = load @"dy" : f32[4,5]
      %dw, %db = FCGradient(%x, %w, %dy) : f32[5,3], f32[5]
      store @"w_grad"(%dw)
      defer @"x_grad"(%x, %w, %dy) {
      ^(%x_1: f32[4,3], %w_1: f32[5,3], %dy_1: f32[4,5]):
        %dw_1, %db_1, %dx = FCGradient(%x_1, %w_1, %dy_1) : f32[5,3], f32[5], f32[4,3]
        yield(%dx)
      }
      %dw2, %db2, %dx2 = FCGradient(%x, %w, %dy) : f32[5,3], f32[5], f32[4,3]
      store @"y_grad"(%dx2)
      %l = load @"y_grad" : f32[4,3]
      store @"z"(%l)
    }
  }
}
""")

case('dce: ConvGradient\'s dX is its optional result with or without a bias: a store of it nothing else uses '
     'becomes a defer; written as (dW, db), no_bias=0 has no dX, and its db stays (Caffe2 makes dX only '
     'when named)', "dce", """
module {
  group body {
    task @"t" {workspace = "global"} body {
      %x = load @"x" : f32[2,3,6,6]
      %w = load @"w" : f32[4,3,3,3]
      %dy = load @"dy" : f32[2,4,4,4]
      %dw, %db, %dx = ConvGradient(%x, %w, %dy) {kernel = 3} : f32[4,3,3,3], f32[4], f32[2,3,6,6]
      store @"w_grad"(%dw)
      store @"b_grad"(%db)
      store @"x_grad"(%dx)
      %dw2, %dx2 = ConvGradient(%x, %w, %dy) {kernel = 3, no_bias = 1} : f32[4,3,3,3], f32[2,3,6,6]
      store @"w2_grad"(%dw2)
      store @"x2_grad"(%dx2)
      %dw3, %db3 = ConvGradient(%x, %w, %dy) {kernel = 3} : f32[4,3,3,3], f32[4]
      store @"w3_grad"(%dw3)
      store @"b3_grad"(%db3)
    }
  }
}
""", """
module {
  group body {
    task @"t" {workspace = "global"} body {
      %x = load @"x" : f32[2,3,6,6]
      %w = load @"w" : f32[4,3,3,3]
      %dy = load @"dy" : f32[2,4,4,4]
      %dw, %db = ConvGradient(%x, %w, %dy) {kernel = 3} : f32[4,3,3,3], f32[4]
      store @"w_grad"(%dw)
      store @"b_grad"(%db)
      defer @"x_grad"(%x, %w, %dy) {
      ^(%x_1: f32[2,3,6,6], %w_1: f32[4,3,3,3], %dy_1: f32[2,4,4,4]):
        %dw_1, %db_1, %dx = ConvGradient(%x_1, %w_1, %dy_1) {kernel = 3} : f32[4,3,3,3], f32[4], f32[2,3,6,6]
        yield(%dx)
      }
      %dw2 = ConvGradient(%x, %w, %dy) {kernel = 3, no_bias = 1} : f32[4,3,3,3]
      store @"w2_grad"(%dw2)
      defer @"x2_grad"(%x, %w, %dy) {
      ^(%x_2: f32[2,3,6,6], %w_2: f32[4,3,3,3], %dy_2: f32[2,4,4,4]):
        %dw2_1, %dx2 = ConvGradient(%x_2, %w_2, %dy_2) {kernel = 3, no_bias = 1} : f32[4,3,3,3], f32[2,3,6,6]
        yield(%dx2)
      }
      %dw3, %db3 = ConvGradient(%x, %w, %dy) {kernel = 3} : f32[4,3,3,3], f32[4]
      store @"w3_grad"(%dw3)
      store @"b3_grad"(%db3)
    }
  }
}
""")

case('fuse-nets then dce: stores nobody reads in a private task go', "fuse-nets,dce", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = Const {value = dense<i64: 2>} : i64
      store @"x"(%a)
      %x = load @"x" : i64
      %b = Add(%x, %x) : i64
      store @"y"(%b)
      %x2 = load @"x" : i64
      store @"z"(%x2)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = Const {value = dense<i64: 2>} : i64
      %b = Add(%a, %a) : i64
      store @"y"(%b)
    }
  }
}
""")

case('promote-blobs: an accumulator becomes a carried value', "promote-blobs", """
module {
  group body {
    task @"t" {workspace = "global", outputs = [@"total"]} body {
      %zero = Const {value = dense<i64: 0>} : i64
      store @"total"(%zero)
      %n = Const {value = dense<i64: 4>} : i64
      for(%n) {
      ^(%i: i64):
        %t = load @"total" : i64
        %u = Add(%t, %i) : i64
        store @"total"(%u)
        yield
      }
    }
  }
}
""", """
module {
  group body {
    task @"t" {workspace = "global", outputs = [@"total"]} body {
      %zero = Const {value = dense<i64: 0>} : i64
      %n = Const {value = dense<i64: 4>} : i64
      %0 = for(%n, %zero) : i64 {
      ^(%i: i64, %total: i64):
        %u = Add(%total, %i) : i64
        yield(%u)
      }
      store @"total"(%0)
    }
  }
}
""")

case('promote-blobs: if results; a maybe-unset blob keeps its check', "promote-blobs", """
module {
  group body {
    task @"t" {workspace = "global", outputs = [@"y"]} body {
      %c = load @"c" : bool
      %one = Const {value = dense<i64: 1>} : i64
      if(%c) then {
        store @"y"(%one)
      } else {
        %y = load @"y" : i64
        %y2 = Add(%y, %one) : i64
        store @"y"(%y2)
      }
    }
  }
}
""", """
module {
  group body {
    task @"t" {workspace = "global", outputs = [@"y"]} body {
      %c = load @"c" : bool
      %one = Const {value = dense<i64: 1>} : i64
      %y = load @"y" {optional = 1} : i64
      %0 = if(%c) : i64 then {
        yield(%one)
      } else {
        %1 = must @"y"(%y) : i64
        %y2 = Add(%1, %one) : i64
        yield(%y2)
      }
      store @"y"(%0)
    }
  }
}
""")

case('promote-blobs: break_if passes the carried value out', "promote-blobs", """
module {
  group body {
    task @"t" {workspace = "global", outputs = [@"x"]} body {
      %five = Const {value = dense<i64: 5>} : i64
      store @"x"(%five)
      loop {
        %x = load @"x" : i64
        %zero = Const {value = dense<i64: 0>} : i64
        %done = EQ(%x, %zero) : bool
        break_if(%done)
        %m1 = Const {value = dense<i64: -1>} : i64
        %x2 = Add(%x, %m1) : i64
        store @"x"(%x2)
        yield
      }
    }
  }
}
""", """
module {
  group body {
    task @"t" {workspace = "global", outputs = [@"x"]} body {
      %five = Const {value = dense<i64: 5>} : i64
      %0 = loop(%five) : i64 {
      ^(%x: i64):
        %zero = Const {value = dense<i64: 0>} : i64
        %done = EQ(%x, %zero) : bool
        break_if(%done, %x)
        %m1 = Const {value = dense<i64: -1>} : i64
        %x2 = Add(%x, %m1) : i64
        yield(%x2)
      }
      store @"x"(%0)
    }
  }
}
""")

case('promote-blobs: a blob two concurrent tasks touch stays in the workspace', "promote-blobs", """
module {
  group body {
    task @"a" {workspace = "global"} body {
      %n = Const {value = dense<i64: 3>} : i64
      for(%n) {
      ^(%i: i64):
        %s = load @"shared" : i64
        %s2 = Add(%s, %i) : i64
        store @"shared"(%s2)
        yield
      }
    }
    task @"b" {workspace = "global"} body {
      %s = load @"shared" : i64
      store @"seen"(%s)
    }
  }
}
""", """
module {
  group body {
    task @"a" {workspace = "global"} body {
      %n = Const {value = dense<i64: 3>} : i64
      for(%n) {
      ^(%i: i64):
        %s = load @"shared" : i64
        %s2 = Add(%s, %i) : i64
        store @"shared"(%s2)
        yield
      }
    }
    task @"b" {workspace = "global"} body {
      %s_1 = load @"shared" : i64
      store @"seen"(%s_1)
    }
  }
}
""")

case('fold-constants: constant math, x + 0, a constant if', "fold-constants,dce", """
module {
  group body {
    task @"t" {outputs = [@"y", @"z"]} body {
      %a = Const {value = dense<i64: 2>} : i64
      %b = Const {value = dense<i64: 3>} : i64
      %c = Mul(%a, %b) : i64
      %x = load @"x" : i64
      %zero = Const {value = dense<i64: 0>} : i64
      %d = Add(%x, %zero) : i64
      %e = Add(%d, %c) : i64
      store @"y"(%e)
      %t = Const {value = dense<bool: true>} : bool
      if(%t) then {
        store @"z"(%c)
      } else {
        store @"z"(%x)
      }
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y", @"z"]} body {
      %c = Const {value = dense<i64: 6>} : i64
      %x = load @"x" : i64
      %e = Add(%x, %c) : i64
      store @"y"(%e)
      store @"z"(%c)
    }
  }
}
""")

case('cse: repeats reuse the first, inside nested regions too', "cse", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %x = load @"x" : i64
      %a = Mul(%x, %x) : i64
      %b = Mul(%x, %x) : i64
      %c = Add(%a, %b) : i64
      %p = load @"p" : bool
      if(%p) then {
        %d = Mul(%x, %x) : i64
        store @"y"(%d)
      } else {
        store @"y"(%c)
      }
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %x = load @"x" : i64
      %a = Mul(%x, %x) : i64
      %c = Add(%a, %a) : i64
      %p = load @"p" : bool
      if(%p) then {
        store @"y"(%a)
      } else {
        store @"y"(%c)
      }
    }
  }
}
""")

case('dce: unused ops and unread private stores go, global stores stay', "dce", """
module {
  group body {
    task @"private" {outputs = [@"out"]} body {
      %x = load @"x" : i64
      %unused = Mul(%x, %x) : i64
      store @"tmp"(%x)
      store @"out"(%x)
    }
    task @"global" {workspace = "global"} body {
      %x = load @"x" : i64
      store @"kept"(%x)
    }
  }
}
""", """
module {
  group body {
    task @"private" {outputs = [@"out"]} body {
      %x = load @"x" : i64
      store @"out"(%x)
    }
    task @"global" {workspace = "global"} body {
      %x_1 = load @"x" : i64
      store @"kept"(%x_1)
    }
  }
}
""")

# (test_pass also checks that %x, which stays, keeps no use by the ops that went)
case('dce: a carried value nothing live needs goes, with the ops and stores that feed it', "dce", """
module {
  group body {
    task @"t" {outputs = [@"out"]} body {
      %n = Const {value = dense<i64: 3>} : i64
      %x = load @"x" : i64
      %a0 = load @"a" {optional = 1} : i64
      %b0 = load @"b" {optional = 1} : i64
      %a, %b = for(%n, %a0, %b0) : i64, i64 {
      ^(%i: i64, %ac: i64, %bc: i64):
        %s = Add(%ac, %i) : i64
        %t = Add(%bc, %x) : i64
        yield(%s, %t)
      }
      store @"out"(%a)
      store @"tmp"(%b)
      store @"tmp2"(%x)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"out"]} body {
      %n = Const {value = dense<i64: 3>} : i64
      %x = load @"x" : i64
      %a0 = load @"a" {optional = 1} : i64
      %a = for(%n, %a0) : i64 {
      ^(%i: i64, %ac: i64):
        %s = Add(%ac, %i) : i64
        yield(%s)
      }
      store @"out"(%a)
    }
  }
}
""")

case('fuse-elementwise: a chain over one shape becomes one kernel', "fuse-elementwise", """
module {
  group body {
    task @"t" {outputs = [@"y", @"t"]} body {
      %a = load @"a" : f32[8]
      %b = load @"b" : f32[8]
      %c = load @"c" : f32[8]
      %t = Mul(%a, %b) : f32[8]
      %u = Add(%t, %c) : f32[8]
      %r = Relu(%u) : f32[8]
      %h = Scale(%r) {scale = 0.5} : f32[8]
      %y = Sub(%h, %a) : f32[8]
      store @"y"(%y)
      store @"t"(%t)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y", @"t"]} body {
      %a = load @"a" : f32[8]
      %b = load @"b" : f32[8]
      %c = load @"c" : f32[8]
      %t, %y = fused(%a, %b, %c) : f32[8], f32[8] {
      ^(%a_1: f32[8], %b_1: f32[8], %c_1: f32[8]):
        %t_1 = Mul(%a_1, %b_1) : f32[8]
        %u = Add(%t_1, %c_1) : f32[8]
        %r = Relu(%u) : f32[8]
        %h = Scale(%r) {scale = 0.5} : f32[8]
        %y_1 = Sub(%h, %a_1) : f32[8]
        yield(%t_1, %y_1)
      }
      store @"y"(%y)
      store @"t"(%t)
    }
  }
}
""")

case('schedule: independent large ops run together; prints keep their order', "schedule", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = load @"a" : f32[1000000]
      %b = load @"b" : f32[1000000]
      %x = Exp(%a) : f32[1000000]
      %y = Log(%b) : f32[1000000]
      Print(%a) {blob = "a"}
      %z = Add(%x, %y) : f32[1000000]
      Print(%z) {blob = "z"}
      store @"y"(%z)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = load @"a" : f32[1000000]
      %b = load @"b" : f32[1000000]
      %x, %y = concurrent : f32[1000000], f32[1000000] {
        %x_1 = Exp(%a) : f32[1000000]
        %y_1 = Log(%b) : f32[1000000]
        yield(%x_1, %y_1)
      }
      Print(%a) {blob = "a"}
      %z = Add(%x, %y) : f32[1000000]
      Print(%z) {blob = "z"}
      store @"y"(%z)
    }
  }
}
""")


case('promote-blobs after infer-types: users of a forwarded load take the stored value\'s type',
     "infer-types,promote-blobs", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %s = Const {value = dense<f32: 1.0>} : f32
      store @"x"(%s)
      %v = Const {value = dense<f32[2]: 1.0, 2.0>} : f32[2]
      store @"x"(%v)
      %x = load @"x" : f32
      %y = Add(%x, %x) : f32
      store @"y"(%y)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %s = Const {value = dense<f32: 1.0>} : f32
      %v = Const {value = dense<f32[2]: 1.0, 2.0>} : f32[2]
      %y = Add(%v, %v) : f32[2]
      store @"x"(%v)
      store @"y"(%y)
    }
  }
}
""")


def assert_uses_are_live(module):
    """Every use recorded on a value is an op still in the module, with that operand."""
    ops = module.walk()
    live = set(map(id, ops))
    values = [v for op in ops for v in op.operands]
    values += [a for op in ops for r in op.regions for a in r.args]
    values += [res for op in ops for res in op.results]
    for v in values:
        for user, i in v.uses:
            assert id(user) in live, f"{v} keeps a use by {user.name}, which left the module"
            assert user.operands[i] is v


case('promote-blobs: a store at the end of a loop body passes on a value the carrying replaces '
     '(a load in the body becomes the carried argument)', "promote-blobs", """
module {
  group body {
    task @"t" {outputs = [@"b"]} body {
      %c = Const {value = dense<i64: 2>} : i64
      %l = load @"p" : i64
      store @"a"(%c)
      for(%c) {
      ^(%i: i64):
        %x = load @"a" : i64
        %y = Add(%x, %i) : i64
        store @"b"(%l)
        store @"a"(%y)
        store @"q"(%x)
        yield
      }
      %z = load @"b" : i64
      store @"p"(%z)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"b"]} body {
      %c = Const {value = dense<i64: 2>} : i64
      %l = load @"p" : i64
      %b = load @"b" {optional = 1} : i64
      %q = load @"q" {optional = 1} : i64
      %0, %1, %2 = for(%c, %c, %b, %q) : i64, i64, i64 {
      ^(%i: i64, %a: i64, %b_1: i64, %q_1: i64):
        %y = Add(%a, %i) : i64
        yield(%y, %l, %a)
      }
      %3 = must @"b"(%1) : i64
      store @"a"(%0)
      store @"b"(%1)
      store @"q"(%2)
      store @"p"(%3)
    }
  }
}
""")

case('promote-blobs: stores at the end of a region pass on values replaced before the carrying '
     '(an outer load, forwarded) and during it (a load that becomes a must)', "promote-blobs", """
module {
  group body {
    task @"t" {outputs = [@"b", @"q"]} body {
      %c = Const {value = dense<i64: 2>} : i64
      store @"p"(%c)
      %l = load @"p" : i64
      %t = Const {value = dense<bool: true>} : bool
      if(%t) then {
        %x = load @"a" : i64
        store @"q"(%x)
        store @"b"(%l)
      } else {
      }
      for(%c) {
      ^(%i: i64):
        %u = load @"b" : i64
        %v = Add(%u, %i) : i64
        store @"b"(%v)
        store @"q"(%u)
        yield
      }
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"b", @"q"]} body {
      %c = Const {value = dense<i64: 2>} : i64
      %t = Const {value = dense<bool: true>} : bool
      %a = load @"a" {optional = 1} : i64
      %b = load @"b" {optional = 1} : i64
      %q = load @"q" {optional = 1} : i64
      %0, %1, %2 = if(%t) : i64, i64, i64 then {
        %3 = must @"a"(%a) : i64
        yield(%a, %c, %3)
      } else {
        yield(%a, %b, %q)
      }
      %4, %5 = for(%c, %1, %2) : i64, i64 {
      ^(%i: i64, %b_1: i64, %q_1: i64):
        %6 = must @"b"(%b_1) : i64
        %v = Add(%6, %i) : i64
        yield(%v, %6)
      }
      store @"p"(%c)
      store @"a"(%0)
      store @"b"(%4)
      store @"q"(%5)
    }
  }
}
""")


case('fuse-conv: Conv, test-mode SpatialBN, a residual Sum and Relu become one ConvFused', "fuse-conv", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %x = load @"x" : f32[1,4,5,5]
      %w = load @"w" : f32[4,4,3,3]
      %b = load @"b" : f32[4]
      %s = load @"s" : f32[4]
      %t = load @"t" : f32[4]
      %m = load @"m" : f32[4]
      %v = load @"v" : f32[4]
      %c = Conv(%x, %w, %b) {kernel = 3, pad = 1} : f32[1,4,5,5]
      %n = SpatialBN(%c, %s, %t, %m, %v) {is_test = 1} : f32[1,4,5,5]
      %u = Sum(%n, %x) : f32[1,4,5,5]
      %y = Relu(%u) : f32[1,4,5,5]
      store @"y"(%y)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %x = load @"x" : f32[1,4,5,5]
      %w = load @"w" : f32[4,4,3,3]
      %b = load @"b" : f32[4]
      %s = load @"s" : f32[4]
      %t = load @"t" : f32[4]
      %m = load @"m" : f32[4]
      %v = load @"v" : f32[4]
      %y = ConvFused(%x, %w, %b, %s, %t, %m, %v, %x) {kernel = 3, pad = 1, bias = 1, bn = 1, residual = 1, relu = 1} : f32[1,4,5,5]
      store @"y"(%y)
    }
  }
}
""")

case('fuse-conv: a stored or twice-read intermediate, training BN and NHWC stay apart', "fuse-conv", """
module {
  group body {
    task @"t" {outputs = [@"y", @"c", @"z"]} body {
      %x = load @"x" : f32[1,4,5,5]
      %w = load @"w" : f32[4,4,1,1]
      %s = load @"s" : f32[4]
      %c = Conv(%x, %w) : f32[1,4,5,5]
      store @"c"(%c)
      %y = Relu(%c) : f32[1,4,5,5]
      store @"y"(%y)
      %d = Conv(%x, %w) : f32[1,4,5,5]
      %n, %rm, %rv, %sm, %sv = SpatialBN(%d, %s, %s, %s, %s) : f32[1,4,5,5], f32[4], f32[4], f32[4], f32[4]
      %z = Relu(%n) : f32[1,4,5,5]
      store @"z"(%z)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y", @"c", @"z"]} body {
      %x = load @"x" : f32[1,4,5,5]
      %w = load @"w" : f32[4,4,1,1]
      %s = load @"s" : f32[4]
      %c = Conv(%x, %w) : f32[1,4,5,5]
      store @"c"(%c)
      %y = Relu(%c) : f32[1,4,5,5]
      store @"y"(%y)
      %d = Conv(%x, %w) : f32[1,4,5,5]
      %n, %rm, %rv, %sm, %sv = SpatialBN(%d, %s, %s, %s, %s) : f32[1,4,5,5], f32[4], f32[4], f32[4], f32[4]
      %z = Relu(%n) : f32[1,4,5,5]
      store @"z"(%z)
    }
  }
}
""")

case('fuse-conv: two convolutions joined by one Sum: the first takes the join, the second its bias only', "fuse-conv", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %x = load @"x" : f32[1,4,5,5]
      %w = load @"w" : f32[4,4,1,1]
      %b = load @"b" : f32[4]
      %p = Conv(%x, %w) : f32[1,4,5,5]
      %q = Conv(%x, %w, %b) : f32[1,4,5,5]
      %r = Relu(%q) : f32[1,4,5,5]
      %u = Add(%p, %r) : f32[1,4,5,5]
      %y = Relu(%u) : f32[1,4,5,5]
      store @"y"(%y)
    }
  }
}
""", """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %x = load @"x" : f32[1,4,5,5]
      %w = load @"w" : f32[4,4,1,1]
      %b = load @"b" : f32[4]
      %r = ConvFused(%x, %w, %b) {bias = 1, relu = 1} : f32[1,4,5,5]
      %y = ConvFused(%x, %w, %r) {residual = 1, relu = 1} : f32[1,4,5,5]
      store @"y"(%y)
    }
  }
}
""")


@pytest.mark.parametrize("before, passes, after", CASES)
def test_pass(before, passes, after, monkeypatch):
    # (the cases are written for a process that may run on two CPUs: schedule's concurrent ops)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    module = parse(before)
    PassManager(passes.split(","), verify_each=True).run(module)
    verify(module)
    assert print_module(module, with_locs=False).strip() == after.strip()
    assert_uses_are_live(module)
    # every pass output is valid text again
    assert print_module(parse(print_module(module))) == print_module(module)


def test_on_one_cpu_schedule_makes_no_concurrent_op(monkeypatch):
    # (two ops over large arrays only take turns on one CPU, and a concurrent op would
    # split the run of ops the numba backend compiles as one function)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    text = """
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = load @"a" : f32[1000000]
      %b = load @"b" : f32[1000000]
      %x = Exp(%a) : f32[1000000]
      %y = Log(%b) : f32[1000000]
      %z = Add(%x, %y) : f32[1000000]
      store @"y"(%z)
    }
  }
}
"""
    module = parse(text)
    PassManager(["schedule"], verify_each=True).run(module)
    assert print_module(module, with_locs=False).strip() == text.strip()


def test_loop_nest_of_the_loops_example_is_pure_dataflow(capsys):
    """After the default pipeline the seed's loop nest has no load or store inside it."""
    from dslc.driver.cli import main

    assert main(["ir", "--print-ir-after-all", "--no-locs", "examples/loops.py"]) == 0
    out = capsys.readouterr().out
    assert out.count("// ----- IR after") == len(DEFAULT_PIPELINE)
    final = parse(out.split("// ----- IR after dce ----- //")[-1].split("// -----")[0])
    loops = [op for op in final.walk() if op.name == "for"]
    assert len(loops) == 2  # the outer and the inner loop
    inside = [op.name for op in loops[0].walk()]
    assert "load" not in inside and "store" not in inside and "flag" not in inside
    assert inside.count("Add") == 5  # val, and the four accumulators


def test_only_type_keeping_passes_leave_the_settled_mark():
    """infer-types sets the mark; the pass manager clears it before any pass that may change
    types without saying so (here cse), so a later promote-blobs infers every op."""
    module = parse('''
module {
  group body {
    task @"t" {outputs = [@"y"]} body {
      %a = Const {value = dense<i64: 2>} : i64
      %b = Add(%a, %a) : i64
      store @"y"(%b)
    }
  }
}
''')
    assert not module.types_settled
    PassManager(["infer-types"]).run(module)
    assert module.types_settled
    PassManager(["cse"]).run(module)
    assert not module.types_settled
    PassManager(["infer-types", "promote-blobs"]).run(module)
    assert module.types_settled
