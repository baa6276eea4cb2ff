# Shared helpers for the real-apps suite (spec/real, `rake spec:real`): real
# servers and real libraries from Debian's packages (Rails, Puma, Sidekiq,
# redis-server, PostgreSQL, MariaDB...), installed by script/setup, each
# started on 127.0.0.1 by the example that needs it and killed, with its
# whole process group, when the example ends, pass or fail.
#
# Debian's gems are built for Debian's Ruby: the suite runs on the 3.1 leg of
# script/test only, and says so when started on another Ruby.
require_relative '../spec_helper'
require 'socket'
require 'etc'

module RealApps
  DEBIAN_RUBY = '/usr/bin/ruby'.freeze

  # A process leading a group of its own: kill ends the whole group.
  Group = Struct.new(:pid, :name) do
    def kill
      Process.kill(:KILL, -pid)
    rescue Errno::ESRCH
      nil
    ensure
      begin
        Process.wait(pid)
      rescue Errno::ECHILD
        nil
      end
    end
  end

  module_function

  def debian_ruby?
    File.realpath(RbConfig.ruby) == File.realpath(DEBIAN_RUBY)
  end

  # The environment of a process that loads Debian's gems, not the bundle
  # the specs run in: Bundler's variables cleared, rbtrace under test on the
  # load path, and required at boot unless rbtrace: false.
  # SPAWN_ENV: under ASan, the sanitizer's runtime preloaded first.
  def app_env(rbtrace: true, extra: {})
    cleared = ENV.keys.grep(/\A(BUNDLE_|BUNDLER_|GEM_HOME|GEM_PATH|RUBYGEMS_GEMDEPS)/).to_h { |k| [k, nil] }
    cleared.merge(RBTraceSpec::SPAWN_ENV)
           .merge('RUBYLIB' => RBTraceSpec::LIB, 'RUBYOPT' => (rbtrace ? '-rrbtrace' : nil))
           .merge(extra)
  end

  def free_port
    server = TCPServer.new('127.0.0.1', 0)
    server.addr[1]
  ensure
    server&.close
  end

  # Waits until something accepts connections on 127.0.0.1:port; raises,
  # with the server's log, if it does not within timeout or its process
  # (a Group) exits first.
  def wait_for_port(port, group, log:, timeout: 60)
    deadline = Time.now + timeout
    loop do
      begin
        TCPSocket.new('127.0.0.1', port).close
        return
      rescue Errno::ECONNREFUSED, Errno::ECONNRESET
        nil
      end
      if Process.waitpid(group.pid, Process::WNOHANG)
        raise "#{group.name} exited before listening on #{port}:\n#{tail(log)}"
      end
      raise "#{group.name} not listening on #{port} after #{timeout} s:\n#{tail(log)}" if Time.now > deadline

      sleep 0.1
    end
  end

  # The port a Puma started with `-b tcp://127.0.0.1:0` says it listens on in
  # its log; raises with the log if its process (a Group) exits first.
  def puma_port(log, puma, timeout: 60)
    Timeout.timeout(timeout) do
      loop do
        port = File.read(log)[%r{Listening on http://127\.0\.0\.1:(\d+)}, 1]
        return Integer(port) if port
        raise "puma exited before listening:\n#{tail(log)}" if Process.waitpid(puma.pid, Process::WNOHANG)

        sleep 0.1
      end
    end
  end

  def tail(path, bytes = 4000)
    return "(no log at #{path})" unless File.exist?(path)

    File.binread(path)[-bytes..] || File.binread(path)
  end

  # The pids of parent's children.
  def children_of(parent)
    Dir['/proc/[0-9]*/stat'].filter_map do |stat|
      fields = File.read(stat)[/\) \S (\d+)/, 1]
      File.basename(File.dirname(stat)).to_i if fields&.to_i == parent
    rescue Errno::ENOENT, Errno::ESRCH
      nil
    end
  end

  # A system user for servers that refuse to run as root (PostgreSQL),
  # created if missing (as root, as CI runs).
  def service_user(name = 'rbtrace-real')
    RBTraceSpec.system_user(name)
  end

  # Commands missing from PATH, for a clear message naming the packages.
  def require_commands!(packages_by_command)
    missing = packages_by_command.reject do |cmd, _|
      cmd.start_with?('/') ? File.executable?(cmd) : system('sh', '-c', "command -v #{cmd}", out: File::NULL)
    end
    return if missing.empty?

    raise "#{missing.keys.join(', ')} missing: run script/setup (Debian packages #{missing.values.uniq.join(', ')})"
  end
end

# Helpers for the examples: servers registered here are killed after each
# example, after the spec_helper's targets and clients.
module RealAppsExample
  # Starts cmd in a process group of its own, its output to log.
  def spawn_group(name, *cmd, log:, env: {}, chdir: Dir.pwd, **opts)
    pid = Process.spawn(env, *cmd, chdir: chdir, out: log, err: %i[child out], in: :close, pgroup: true, **opts)
    group = RealApps::Group.new(pid, name)
    @real_processes << group
    group
  end

  # A temporary directory, removed when the example ends, after its servers
  # are killed: one still running could write into it while it is removed.
  def real_tmpdir(prefix)
    dir = Dir.mktmpdir(prefix)
    @real_dirs << dir
    dir
  end

  # cmd as the suite's service user (servers that refuse root: PostgreSQL, MariaDB).
  def as_service_user(*cmd)
    user = RealApps.service_user
    ['setpriv', "--reuid=#{user.uid}", "--regid=#{user.gid}", '--clear-groups', *cmd]
  end

  # A throwaway database server whose files are in dir (given to the
  # service user): init makes its data directory, then server runs, both
  # as the service user, until it listens on 127.0.0.1:port. The Group;
  # raises with the log of the step that failed. Logs: dir/NAME-init.log, dir/NAME.log.
  def start_database(name, dir:, port:, init:, server:)
    user = RealApps.service_user
    File.chown(user.uid, user.gid, dir)
    log = File.join(dir, "#{name}-init.log")
    ok = system(*as_service_user(*init), out: log, err: %i[child out])
    raise "#{File.basename(init.first)} failed:\n#{RealApps.tail(log)}" unless ok

    log = File.join(dir, "#{name}.log")
    group = spawn_group(name, *as_service_user(*server), log: log)
    RealApps.wait_for_port(port, group, log: log)
    group
  end
end

RSpec.configure do |config|
  config.include RealAppsExample, file_path: %r{spec/real/}
  config.before(file_path: %r{spec/real/}) do
    @real_processes = []
    @real_dirs = []
    unless RealApps.debian_ruby?
      raise "the real-apps suite needs Debian's Ruby (#{RealApps::DEBIAN_RUBY}), whose gems Debian built; " \
            "this is #{RbConfig.ruby}: run it on the 3.1 leg (script/test 3.1)"
    end
  end
  config.after(file_path: %r{spec/real/}) do
    @real_processes.reverse_each(&:kill)
    @real_dirs.each { |dir| FileUtils.rm_rf(dir) }
  end
end
