Rails.application.routes.draw do
  get '/posts', to: 'posts#index'          # ordinary: one query with its authors
  get '/posts/slow', to: 'posts#slow'      # slow-ish: ~30 ms in nested calls
  get '/posts/n_plus_one', to: 'posts#n_plus_one' # one query, then one per post
  get '/posts/boom', to: 'posts#boom'      # raises: a 500
end
