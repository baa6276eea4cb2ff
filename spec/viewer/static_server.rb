# A static file server for the viewer specs: serves a few directories, each
# under its own URL prefix, on 127.0.0.1 and a free port, from a thread of
# the spec run (stopped by #stop, which the spec calls when its example
# ends). GET and HEAD only, files only, no path outside the directories
# given: enough for speedscope's page and the trace files it loads. All of
# it on one origin, so speedscope's fetch of a trace needs no CORS header.
require 'socket'
require 'uri'

class StaticServer
  TYPES = {
    '.html' => 'text/html; charset=utf-8', '.js' => 'text/javascript', '.mjs' => 'text/javascript',
    '.css' => 'text/css', '.json' => 'application/json', '.wasm' => 'application/wasm',
    '.png' => 'image/png', '.ico' => 'image/x-icon', '.woff2' => 'font/woff2',
    '.ttf' => 'font/ttf', '.txt' => 'text/plain; charset=utf-8', '.folded' => 'text/plain; charset=utf-8'
  }.freeze

  attr_reader :port, :requests

  # roots: { '/speedscope' => '/dir/of/speedscope', '/traces' => '/tmp/x' }
  def initialize(roots)
    @roots = roots.transform_values { |dir| File.realpath(dir) }
    @server = TCPServer.new('127.0.0.1', 0)
    @port = @server.addr[1]
    @requests = Queue.new
    @thread = Thread.new { serve }
    @thread.report_on_exception = false
  end

  def url(path) = "http://127.0.0.1:#{port}#{path}"

  def stop
    @thread.kill
    @thread.join(5)
    @server.close unless @server.closed?
  end

  private

  def serve
    loop do
      client = @server.accept
      begin
        answer(client)
      rescue IOError, SystemCallError
        nil # the browser went away mid-answer: nothing to say to it
      ensure
        client.close
      end
    end
  end

  # One request per connection (Connection: close): the browser reconnects.
  def answer(client)
    request = client.gets("\r\n\r\n", 16_384).to_s
    verb, target = request.lines.first.to_s.split(' ', 3)
    path = URI.decode_www_form_component(target.to_s.split(/[?#]/, 2).first.to_s)
    @requests << "#{verb} #{path}"
    file = file_for(path) if %w[GET HEAD].include?(verb)
    return respond(client, '404 Not Found', 'text/plain', "not found: #{path}\n") unless file

    type = TYPES.fetch(File.extname(file), 'application/octet-stream')
    respond(client, '200 OK', type, verb == 'HEAD' ? nil : File.binread(file), File.size(file))
  end

  # The file a URL path names, or nil when it names none under the roots.
  def file_for(path)
    prefix, dir = @roots.find { |p, _| path == p || path.start_with?("#{p}/") }
    return unless prefix

    relative = path.delete_prefix(prefix).delete_prefix('/')
    relative = 'index.html' if relative.empty?
    return if relative.split('/').include?('..')

    file = File.join(dir, relative)
    file if File.file?(file) && File.realpath(file).start_with?("#{dir}/")
  end

  def respond(client, status, type, body, length = body.bytesize)
    client.write("HTTP/1.1 #{status}\r\nContent-Type: #{type}\r\nContent-Length: #{length}\r\n" \
                 "Cache-Control: no-store\r\nConnection: close\r\n\r\n")
    client.write(body) if body
  end
end
