module RBTrace
  # The children rbtrace forks in the app (--heapdump's and --shapesdump's
  # dumping child, --fork's middle process: lib/rbtrace/reports.rb) must
  # not wake it when they exit, on a Ruby with Bug #21812.
  module QuietChildren
    # Ruby 4.0.0's Bug #21812 (https://bugs.ruby-lang.org/issues/21812,
    # fixed after 4.0.0 by ruby/ruby 7e81bf5c0c): any SIGCHLD ends the main
    # thread's untimed `sleep`, so an app whose main thread ends in `sleep`
    # exits when a child of its exits. Nothing short of a child's exit shows
    # the bug, and that is what must not happen: known by the version.
    SIGCHLD_ENDS_SLEEP = RUBY_ENGINE == 'ruby' && RUBY_VERSION == '4.0.0'

    module_function

    # Runs the block, which forks a child and waits for it, so that the
    # child's exit does not wake the app on a Ruby with Bug #21812: SIGCHLD
    # is discarded (its disposition the system's default: no signal, the
    # child still waited for) until the block has waited for the child,
    # then Ruby's handler is back. Only where the app has no CHLD trap of
    # its own: one that has sees our child's exit as on any Ruby, since a
    # trap must not miss the app's own children. Meanwhile the app's own
    # children's exits signal nothing either: with no trap, Ruby 4.0 needs
    # no SIGCHLD to wait for a child.
    def around
      return yield unless SIGCHLD_ENDS_SLEEP

      previous = Signal.trap(:CHLD, 'SYSTEM_DEFAULT')
      unless previous == 'DEFAULT' # the app's own trap: put back at once
        Signal.trap(:CHLD, previous)
        previous = nil
      end
      yield
    ensure
      Signal.trap(:CHLD, previous) if previous
    end
  end
end
