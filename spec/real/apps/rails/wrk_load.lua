-- wrk's load on the real-apps suite's Rails app (spec/real/rails_spec.rb,
-- bench/real_app.rb): the ordinary, N+1 and slow actions in turn, never the
-- one that raises (its 500s would count as errors).
local paths = { "/posts", "/posts/n_plus_one", "/posts/slow" }
local i = 0

request = function()
  i = i % #paths + 1
  return wrk.format("GET", paths[i])
end
