# The SysV message queues a target is served through, seen from outside in
# /proc/sysvipc/msg: the one under its key, or a private one it read last
# (what the app makes when a foreign queue sits under its key).
require 'fiddle'

module RBTraceSpec
  module Queues
    KEY_BASE = 0x52000000
    IPC_RMID = 0

    module_function

    # pid's queues, each as [key, msqid]. A private queue is known only by
    # its last reader, and a pid is reused (pid_max is often 32768): born
    # (epoch seconds) leaves out private queues made before pid's process
    # began, by an earlier process of the same pid.
    def of(pid, born: nil)
      File.readlines('/proc/sysvipc/msg').drop(1).filter_map do |line|
        f = line.split.map(&:to_i)
        key, msqid, lrpid, ctime = f.values_at(0, 1, 6, 13)
        next [key, msqid] if key == (KEY_BASE | pid)
        next unless key.zero? && lrpid == pid

        [key, msqid] unless born && ctime < born
      end
    end

    # Removes what a process that can no longer do it (the specs end their
    # targets with SIGKILL) left: rbtrace removes a stale keyed queue on its
    # next attach, a private one never (README, "Known limits"), and on a
    # machine that runs the specs over and over, a later target with the
    # same pid would seem to own it.
    def remove_left_by(pid, born: nil)
      of(pid, born: born).each do |_key, msqid|
        next if msgctl.call(msqid, IPC_RMID, nil).zero?

        errno = Fiddle.last_error
        next if [Errno::EINVAL::Errno, Errno::EIDRM::Errno].include?(errno)   # gone already

        warn "spec: could not remove message queue #{msqid} of process #{pid}: errno #{errno}"
      end
    end

    # A queue made under key as the spec's user would (ipcrm removes it).
    def create(key, mode)
      qid = msgget.call(key, 0o1000 | mode)   # IPC_CREAT
      raise "msgget(0x#{key.to_s(16)}): errno #{Fiddle.last_error}" if qid.negative?

      qid
    end

    def msgget
      @msgget ||= Fiddle::Function.new(Fiddle.dlopen(nil)['msgget'], [Fiddle::TYPE_INT, Fiddle::TYPE_INT],
                                       Fiddle::TYPE_INT)
    end

    def msgctl
      @msgctl ||= Fiddle::Function.new(Fiddle.dlopen(nil)['msgctl'],
                                       [Fiddle::TYPE_INT, Fiddle::TYPE_INT, Fiddle::TYPE_VOIDP], Fiddle::TYPE_INT)
    end
  end
end
